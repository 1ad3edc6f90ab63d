"""Who may call: a `Host` allow-list in front of everything served, and the bearer token
in front of the API.

The `Host` check is what stops DNS rebinding: a page of another site, open in the
user's own browser, whose name the attacker re-points at 127.0.0.1, reaches this server
with its own name in `Host`; it is answered 421 before anything is read, reads included.
The token (`Authorization: Bearer TOKEN`) is a header no cross-site form or image can
send, so the API needs no CSRF field of its own.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from .credential import ENV, same_token
from .errors import refusal

_DEFAULT_PORT = 80  # what a `Host` without a port means, for plain HTTP


def _split(host: str) -> tuple[str, int | None]:
    """`name[:port]` (an IPv6 address in brackets) as (lowercased name, port or None)."""
    host = host.strip().lower()
    name, port = host, None
    if host.startswith("["):  # [::1]:8080
        end = host.find("]")
        name, rest = host[: end + 1], host[end + 1 :]
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif host.count(":") == 1:
        head, _, tail = host.partition(":")
        if tail.isdigit():
            name, port = head, int(tail)
    elif ":" in host:  # a bare IPv6 address, as given to --host
        name = f"[{host}]"
    return name.rstrip("."), port


def netloc(host: str, port: int) -> str:
    """`host:port` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def loopback_aliases(host: str, port: int) -> list[str]:
    """`localhost:PORT` for a server bound to a loopback address (or to every address,
    loopback included): the name people type into a browser for it.

    It opens no door to DNS rebinding: a browser resolves `localhost` to loopback itself
    (RFC 6761 §6.3; Chromium and Firefox never ask DNS for it), so no page of another
    site can be served under that name, and `Host: localhost:PORT` comes only from a page
    at `http://localhost:PORT`, which is this server's. (Other names of loopback, in
    /etc/hosts say, are for `--allow-host`: a name DNS answers could be re-pointed.)"""
    bare = host.strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return []
    return [f"localhost:{port}"] if address.is_loopback or address.is_unspecified else []


@dataclass(frozen=True)
class HostAllowList:
    """The `Host` values a server answers to: the address it is bound to, and the names
    given with `--allow-host` (`name` matches that name on any port; `name:port` only
    that port)."""

    entries: tuple[tuple[str, int | None], ...]

    @classmethod
    def of(cls, host: str, port: int, others: Iterable[str] = ()) -> HostAllowList:
        """The list of a server bound to `host:port`, plus `others`."""
        return cls(tuple(_split(h) for h in (netloc(host, port), *others) if h.strip()))

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        name, port = _split(header)
        return any(
            name == allowed and (want is None or want == (port or _DEFAULT_PORT))
            for allowed, want in self.entries
        )

    def __str__(self) -> str:
        return ", ".join(n if p is None else f"{n}:{p}" for n, p in self.entries)


class HostGuard:
    """ASGI middleware: a request whose `Host` is not in `allowed` gets 421 (a
    WebSocket, a close), and reaches nothing behind it."""

    def __init__(self, app: ASGIApp, allowed: HostAllowList) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        if self.allowed.allows(host):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await WebSocketClose(code=1008)(scope, receive, send)
            return
        why = (f"this server answers to {self.allowed} only, not to Host {host!r} (a page "
               "of another site reaching it through DNS rebinding looks like this): start it "
               "with --allow-host NAME to serve under another name")  # fmt: skip
        await refusal(421, why)(scope, receive, send)


class BearerGuard:
    """ASGI middleware: a request without `Authorization: Bearer TOKEN`, or with
    another token, gets 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        why = self._refused(Headers(scope=scope).get("authorization"))
        if why is None:
            await self.app(scope, receive, send)
            return
        challenge = {"WWW-Authenticate": 'Bearer realm="durably"'}
        await refusal(401, why, challenge)(scope, receive, send)

    def _refused(self, header: str | None) -> str | None:
        """None if `header` carries the token, else why the call is refused."""
        scheme, _, credential = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            return ("this call needs the token: send the header 'Authorization: Bearer "
                    f"TOKEN' (durably serve prints it at start; {ENV} sets it)")  # fmt: skip
        # Headers are read as latin-1: encoded back, these are the bytes that were sent.
        if not same_token(credential.strip().encode("latin-1"), self.token):
            return f"wrong token: send the one durably serve printed at start (or {ENV}'s)"
        return None
