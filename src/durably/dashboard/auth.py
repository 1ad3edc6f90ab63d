"""The dashboard's token: a session cookie set by logging in (a value derived from the
token), and a CSRF field derived from it that only pages served by the dashboard itself
carry."""

from __future__ import annotations

import hashlib
import hmac
from http.cookies import SimpleCookie

from ..web.credential import new_token, same_token

COOKIE = "durably_token"


class Auth:
    """Checks that a state-changing request comes from a logged-in page of ours."""

    def __init__(self, token: str | None) -> None:
        self.token = new_token(token)

    def csrf(self) -> str:
        return hmac.new(self.token.encode(), b"durably-csrf", hashlib.sha256).hexdigest()

    def session(self) -> str:
        """The login cookie's value: derived from the token, never the token itself. Cookies
        are not kept apart by port, so a browser sends this one to every other server on
        the host; the raw token there would be a bearer token for the whole HTTP API."""
        return hmac.new(self.token.encode(), b"durably-session", hashlib.sha256).hexdigest()

    def cookie_header(self) -> str:
        return f"{COOKIE}={self.session()}; HttpOnly; SameSite=Strict; Path=/"

    def logged_in(self, cookie_header: str | None) -> bool:
        if not cookie_header:
            return False
        cookie = SimpleCookie()
        cookie.load(cookie_header)
        morsel = cookie.get(COOKIE)
        return morsel is not None and same_token(morsel.value, self.session())

    def matches(self, presented: str | None) -> bool:
        """Whether `presented` (the login form's field) is the token."""
        return same_token(presented, self.token)

    def user(self, cookie_header: str | None) -> str | None:
        """Who the request is logged in as, for the page's header: the token is the only
        credential there is, so "token" (None: not logged in)."""
        return "token" if self.logged_in(cookie_header) else None

    def allows(self, cookie_header: str | None, form: dict[str, str], origin: str | None,
               host: str | None) -> str | None:  # fmt: skip
        """None if the action may proceed, else why not."""
        if origin and host and origin.split("://", 1)[-1] != host:
            return "the request came from another site"
        if not self.logged_in(cookie_header):
            return "this action needs the dashboard token: log in first"
        if not same_token(form.get("csrf"), self.csrf()):
            return "the form is stale or forged; reload the page"
        return None
