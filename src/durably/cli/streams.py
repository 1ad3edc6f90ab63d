"""`durably stream RUN KEY` (§4.21): a run's stream, one value a line, until it closes."""

from __future__ import annotations

import typer

from ..client import documents
from ._common import options, run


def register(app: typer.Typer) -> None:
    app.command()(stream)


def stream(
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="the run: its id, or a unique prefix of 8+ characters"),
    key: str = typer.Argument(..., help="the stream's key"),
    offset: int = typer.Option(0, "--from", min=0, help="the offset to start at"),
    json_out: bool = typer.Option(False, "--json", help="every value as JSON (strings too)"),
) -> None:
    """Print run RUN's stream KEY from --from on, one value a line (JSON; a string as it
    is, unless --json), following it until it is closed or the run ends."""
    durably = options(ctx).load(read_only=True)

    async def go() -> None:
        found = await durably.run_id_from_prefix(run_id)
        async for value in durably.read_stream(found, key, offset):
            line = value if isinstance(value, str) and not json_out else documents.text(value)
            typer.echo(line)

    run(go(), durably)
