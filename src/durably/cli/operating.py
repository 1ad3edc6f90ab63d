"""`durably resume | fork | purge | signals` (§4.18)."""

from __future__ import annotations

from typing import Any

import typer

from ..client import documents
from ..core.durations import parse_duration
from ..core.errors import ConfigurationError
from ..store.models import TERMINAL
from . import _render
from ._common import fail, options, print_json, run


def register(app: typer.Typer) -> None:
    app.command()(resume)
    app.command()(fork)
    app.command()(purge)
    app.command()(signals)


def _print_run(doc: dict[str, Any], json_out: bool, what: str) -> None:
    if json_out:
        print_json(doc)
    else:
        typer.echo(f"{what} run {doc['run_id']} ({doc['workflow']}@{doc['version']}) "
                   f"{doc['status']}")  # fmt: skip


def resume(
    ctx: typer.Context,
    run_id: str = typer.Argument(
        ..., help="a failed or canceled run: its id, or a unique prefix of 8+ characters"
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Continue a failed or canceled run from its last completed step; prints the run."""
    durably = options(ctx).load()

    async def go() -> Any:
        return await durably.resume(await durably.run_id_from_prefix(run_id))

    r = run(go(), durably)
    _print_run(documents.run(r), json_out, "resumed")


def fork(
    ctx: typer.Context,
    run_id: str = typer.Argument(
        ..., help="the run to copy: its id, or a unique prefix of 8+ characters"
    ),
    from_position: int = typer.Option(
        ...,
        "--from",
        help="how many entries of the run's log to keep (steps, sleeps, waits, events, "
        "patch markers, caught failures; the error lists them)",
    ),
    version: str | None = typer.Option(None, "--version", help="default: the old run's"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Start a new run with the first N entries of RUN_ID's log; prints it."""
    durably = options(ctx).load()

    async def go() -> Any:
        found = await durably.run_id_from_prefix(run_id)
        handle = await durably.fork(found, from_position=from_position, version=version)
        return handle.run or await handle.get()

    r = run(go(), durably)
    _print_run(documents.run(r), json_out, "forked")


def purge(
    ctx: typer.Context,
    older_than: str = typer.Option(..., "--older-than", help="e.g. 30d, 12h, 0s"),
    status: list[str] | None = typer.Option(None, "--status", help="repeatable"),
    workflow: str | None = typer.Option(None, "--workflow", help="only this workflow's runs"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Delete finished runs older than --older-than, their steps and consumed signals."""
    try:
        parse_duration(older_than)
    except ConfigurationError as exc:
        fail(f"--older-than: {exc}", 2)
    wrong = [s for s in status or [] if s not in TERMINAL]
    if wrong:
        fail(f"--status must be completed, failed or canceled, not {', '.join(wrong)}", 2)
    durably = options(ctx).load()
    done = run(durably.purge(older_than, status or None, workflow=workflow), durably)
    if json_out:
        print_json(done)
    else:
        typer.echo(f"purged {done['runs']} runs and {done['signals']} signals")


def signals(
    ctx: typer.Context,
    name: str | None = typer.Option(None, "--name", help="only signals of this name"),
    all_: bool = typer.Option(False, "--all", help="also delivered, consumed and expired"),
    limit: int = typer.Option(1000, "--limit", min=1),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """List buffered signals (no run has received them yet), or all stored ones."""
    durably = options(ctx).load(read_only=True)
    found = run(durably.list_signals(name, pending=not all_, limit=limit), durably)
    if json_out:
        print_json(found)
    else:
        _render.signals_table(found)
