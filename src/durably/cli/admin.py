"""`durably migrate | tables | worker`."""

from __future__ import annotations

import logging
import os

import typer

from ..core.durations import parse_duration
from ..core.errors import ConfigurationError
from ._common import fail, options, print_json, run


def register(app: typer.Typer) -> None:
    app.command()(migrate)
    app.command()(tables)
    app.command()(worker)
    app.command()(dashboard)
    app.command()(serve)


def migrate(ctx: typer.Context, json_out: bool = typer.Option(False, "--json")) -> None:
    """Apply the engine's migrations (idempotent, under an advisory lock)."""
    durably = options(ctx).load()

    async def go() -> list[str]:
        return await durably.migrate()

    applied = run(go(), durably)
    if json_out:
        print_json({"applied": applied})
    else:
        typer.echo(f"applied {', '.join(applied)}" if applied else "already up to date")


def tables(ctx: typer.Context, json_out: bool = typer.Option(False, "--json")) -> None:
    """List the engine's tables."""
    durably = options(ctx).load()

    names = run(durably.list_tables(), durably)
    if json_out:
        print_json(names)
    else:
        for name in names:
            typer.echo(name)


def worker(
    ctx: typer.Context,
    concurrency: int = typer.Option(10, "--concurrency", min=1, help="runs held at once"),
    lease: str = typer.Option("30s", "--lease", help="how long a claim lasts unrenewed"),
    heartbeat: str = typer.Option("10s", "--heartbeat", help="how often leases are renewed"),
    worker_id: str | None = typer.Option(None, "--id", help="this worker's name"),
    poll: str = typer.Option("5s", "--poll", help="fallback poll interval"),
    grace: str = typer.Option("10s", "--grace", help="how long SIGTERM waits for runs"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run a worker until SIGTERM or SIGINT (then it drains: finishes or releases its runs)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        for value in (lease, heartbeat, poll, grace):
            parse_duration(value)
    except ConfigurationError as exc:
        fail(str(exc), 2)
    durably = options(ctx).load(need_app=True)
    w = durably.worker(concurrency, lease, heartbeat, worker_id, poll, grace)

    async def go() -> None:
        await w.run()

    run(go(), durably)


def dashboard(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind (default loopback)"),
    port: int = typer.Option(8080, "--port"),
    token: str | None = typer.Option(None, "--token", envvar="DURABLY_DASHBOARD_TOKEN",
                                     help="needed for actions; default: a new one, printed"),
) -> None:  # fmt: skip
    """Serve the web dashboard (runs, steps, cancel/signal/start, /metrics)."""
    from ..dashboard import Dashboard

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    board = Dashboard(options(ctx).load(), token)
    typer.echo(f"durably dashboard on http://{host}:{port}/  (token: {board.auth.token})")
    try:
        board.serve(host, port)
    except OSError as exc:
        fail(f"cannot serve on {host}:{port}: {exc.strerror}", 1)
    except KeyboardInterrupt:
        pass


def serve(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind (default loopback)"),
    port: int = typer.Option(8080, "--port", help="0: any free port (the URL printed names it)"),
    allow_host: list[str] | None = typer.Option(
        None, "--allow-host", help="also answer to this Host: NAME (any port) or NAME:PORT; "
        "repeatable (a proxy's name, a machine's)"),
    token: str | None = typer.Option(None, "--token", envvar="DURABLY_DASHBOARD_TOKEN",
                                     help="what every call presents; default: a new one, printed"),
) -> None:  # fmt: skip
    """Serve the HTTP API (/api/v1: runs, signals, events; /api/v1/openapi.json) until
    SIGTERM or SIGINT (then it finishes the calls in flight)."""
    from .. import web

    missing = web.missing_extra()
    if missing:
        absent = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"
        fail(f"durably serve needs the web extra ({absent}): {web.INSTALL}", 2)
    from ..web.app import PREFIX, create_app
    from ..web.credential import new_token
    from ..web.guard import HostAllowList, netloc
    from ..web.server import bind
    from ..web.server import serve as serve_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    durably = options(ctx).load()
    secret = new_token(token)
    try:
        sock = bind(host, port)
    except OSError as exc:
        # create_server's message names the address again: the system's words suffice
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        fail(f"cannot serve on {netloc(host, port)}: {why}", 1)
    port = sock.getsockname()[1]
    typer.echo(f"durably API on http://{netloc(host, port)}{PREFIX}/  (token: {secret})")
    if host.strip("[]") in ("0.0.0.0", "::") and not allow_host:
        typer.echo(f"warning: bound to every address, this server answers to Host "
                   f"{netloc(host, port)} only: name the others with --allow-host",
                   err=True)  # fmt: skip
    serve_app(create_app(durably, secret, HostAllowList.of(host, port, allow_host or ())), sock)
