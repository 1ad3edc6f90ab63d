"""The dashboard's forms (§4.11, §4.18): logging in, and the actions that change state —
cancel, resume, fork, purge, start, signal. Each action needs the login cookie and the
form's CSRF field (`auth.Auth.allows`); what is refused changes nothing. Done, an action
answers 303 to the page that shows its result, a message above it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..client.durably import Durably
from ..core.codec import parse
from .auth import Auth
from .pages import RUN_ID, DashboardError, Handler, Pages

MAX_FORM = 1024 * 1024
Form = dict[str, str]
Action = Callable[[Request, Form], Awaitable[Response]]


class Actions:
    """The forms of `app`'s dashboard, answered through `pages`."""

    def __init__(self, app: Durably, auth: Auth, pages: Pages) -> None:
        self.app = app
        self.auth = auth
        self.pages = pages

    def checked(self, action: Action) -> Handler:
        """`action`, for a logged-in page of ours only (else 403, and nothing done)."""

        async def checked(request: Request) -> Response:
            form = await read_form(request)
            headers = request.headers
            why = self.auth.allows(headers.get("cookie"), form, headers.get("origin"),
                                   headers.get("host"))  # fmt: skip
            if why is not None:
                return self.pages.error(request, 403, why, "refused")
            return await action(request, form)

        return self.pages.guarded(checked)

    async def login(self, request: Request) -> Response:
        """The login form: the token, then the cookie that carries it."""
        if not self.auth.matches((await read_form(request)).get("token")):
            return self.pages.html(request, "login.html", "log in", 403, error="wrong token")
        return _see("/?message=logged+in", {"Set-Cookie": self.auth.cookie_header()})

    async def cancel(self, request: Request, form: Form) -> Response:
        run = await self.app.cancel(_run_id(request))
        return _see(f"/runs/{run.run_id}?message=canceled")

    async def resume(self, request: Request, form: Form) -> Response:
        run = await self.app.resume(_run_id(request))
        return _see(f"/runs/{run.run_id}?message=resumed")

    async def fork(self, request: Request, form: Form) -> Response:
        run_id = _run_id(request)
        try:
            position = int(form.get("from", ""))
        except ValueError:
            raise DashboardError("fork from: a number of steps") from None
        handle = await self.app.fork(run_id, from_position=position,
                                     version=form.get("version") or None)  # fmt: skip
        return _see(f"/runs/{handle.run_id}?message=forked+from+{run_id}")

    async def purge(self, request: Request, form: Form) -> Response:
        done = await self.app.purge(form.get("older_than") or "30d", form.get("status") or None)
        return _see(f"/?message=purged+{done['runs']}+runs+and+{done['signals']}+signals")

    async def start(self, request: Request, form: Form) -> Response:
        key = form.get("idempotency_key") or None
        handle = await self.app.start(form.get("workflow", ""), _json_field(form, "input"),
                                      idempotency_key=key)  # fmt: skip
        return _see(f"/runs/{handle.run_id}?message=started")

    async def signal(self, request: Request, form: Form) -> Response:
        # The name is checked before anything is stored (InvalidInput: 400).
        run_id = form.get("run_id") or None
        result = await self.app.send_signal(form.get("name", ""), _json_field(form, "data"),
                                            run_id=run_id)  # fmt: skip
        if run_id and result["delivered_to"]:
            return _see(f"/runs/{result['delivered_to'][0]}?message=signal+delivered")
        return _see(f"/?message=signal+{'delivered' if result['delivered_to'] else 'buffered'}")


async def read_form(request: Request) -> Form:
    """The request's form fields (each once: the first), read no further than MAX_FORM."""
    length = request.headers.get("content-length", "")
    if length.isascii() and length.isdigit() and int(length) > MAX_FORM:
        raise DashboardError("the form is too large")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_FORM:
            raise DashboardError("the form is too large")
    fields = parse_qs(data.decode(errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def _run_id(request: Request) -> str:
    run_id = str(request.path_params["run_id"])
    if not RUN_ID.fullmatch(run_id):
        raise DashboardError(f"no run {run_id!r}: a run id is letters, digits, - and _")
    return run_id


def _json_field(form: Form, name: str) -> Any:
    # InvalidInput (a 400) for what is not JSON or what JSON cannot hold: NaN, Infinity, NUL.
    return parse(form.get(name, "").strip() or "null", name)


def _see(location: str, headers: dict[str, str] | None = None) -> Response:
    return RedirectResponse(location, 303, headers)
