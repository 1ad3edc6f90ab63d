"""`durably dashboard | serve`: the web dashboard with the HTTP API, or the API alone, on
one uvicorn server each (the extra `durably[web]`)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from .. import web
from ._common import fail, options

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from ..web.guard import HostAllowList

_HOST = typer.Option("127.0.0.1", "--host", help="address to bind (default loopback)")
_PORT = typer.Option(8080, "--port", help="0: any free port (the URL printed names it)")
_ALLOW_HOST = typer.Option(
    None, "--allow-host", help="also answer to this Host: NAME (any port) or NAME:PORT; "
    "repeatable (a proxy's name, a machine's)")  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command()(dashboard)
    app.command()(serve)


def dashboard(
    ctx: typer.Context,
    host: str = _HOST,
    port: int = _PORT,
    allow_host: list[str] | None = _ALLOW_HOST,
    token: str | None = typer.Option(None, "--token", envvar="DURABLY_DASHBOARD_TOKEN",
                                     help="needed for actions and the API; default: a new "
                                     "one, printed"),
) -> None:  # fmt: skip
    """Serve the web dashboard (runs, steps, cancel/signal/start, live updates, /metrics)
    and the HTTP API (/api/v1, the same token) until SIGTERM or SIGINT."""
    _need_the_extra("durably dashboard", pages=True)
    from ..dashboard import Dashboard
    from ..web.guard import HostAllowList, loopback_aliases, netloc

    board = Dashboard(options(ctx).load(), token)
    sock = _bound(host, port)
    port = sock.getsockname()[1]
    typer.echo(f"durably dashboard on http://{netloc(host, port)}/  (token: {board.auth.token})")
    # `localhost` too: see loopback_aliases for why a browser's name for loopback is safe.
    allowed = HostAllowList.of(host, port, [*(allow_host or ()), *loopback_aliases(host, port)])
    _serve(board.asgi(allowed), sock, host, allowed, allow_host, board.streams.close)


def serve(
    ctx: typer.Context,
    host: str = _HOST,
    port: int = _PORT,
    allow_host: list[str] | None = _ALLOW_HOST,
    token: str | None = typer.Option(None, "--token", envvar="DURABLY_DASHBOARD_TOKEN",
                                     help="what every call presents; default: a new one, printed"),
) -> None:  # fmt: skip
    """Serve the HTTP API (/api/v1: runs, signals, events; /api/v1/openapi.json) until
    SIGTERM or SIGINT (then it finishes the calls in flight)."""
    _need_the_extra("durably serve")
    from ..web.app import PREFIX, create_app
    from ..web.credential import new_token
    from ..web.guard import HostAllowList, netloc

    durably = options(ctx).load()
    secret = new_token(token)
    sock = _bound(host, port)
    port = sock.getsockname()[1]
    typer.echo(f"durably API on http://{netloc(host, port)}{PREFIX}/  (token: {secret})")
    allowed = HostAllowList.of(host, port, allow_host or ())
    _serve(create_app(durably, secret, allowed), sock, host, allowed, allow_host)


def _need_the_extra(command: str, pages: bool = False) -> None:
    missing = web.missing_extra(pages)
    if missing:
        absent = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
        fail(f"{command} needs the web extra ({absent}): {web.INSTALL}", 2)


def _bound(host: str, port: int) -> socket.socket:
    from ..web.guard import netloc
    from ..web.server import bind

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        return bind(host, port)
    except OSError as exc:
        # create_server's message names the address again: the system's words suffice
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        fail(f"cannot serve on {netloc(host, port)}: {why}", 1)


def _serve(app: ASGIApp, sock: socket.socket, host: str, allowed: HostAllowList,
           allow_host: list[str] | None, *stopping: Callable[[], None]) -> None:  # fmt: skip
    from ..web.server import serve

    if host.strip("[]") in ("0.0.0.0", "::") and not allow_host:
        typer.echo(f"warning: bound to every address, this server answers to Host "
                   f"{allowed} only: name the others with --allow-host", err=True)  # fmt: skip
    serve(app, sock, stopping)
