"""`durably migrate | tables | worker`."""

from __future__ import annotations

import logging

import typer

from ..core.durations import parse_duration
from ..core.errors import ConfigurationError
from ._common import fail, options, print_json, run


def register(app: typer.Typer) -> None:
    app.command()(migrate)
    app.command()(tables)
    app.command()(worker)


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
