"""`durably request RUN NAME` (SPEC §4.22): ask a running workflow, print its answer."""

from __future__ import annotations

from typing import Any

import typer

from ..core.errors import RequestRejected
from ._common import fail, options, parse_json, print_json, run


def register(app: typer.Typer) -> None:
    app.command()(request)


def request(
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="the run to ask"),
    name: str = typer.Argument(..., help="the request's name (its wait_for_request)"),
    data_text: str | None = typer.Option(None, "--data", help="JSON, or @file"),
    timeout: str = typer.Option("30s", "--timeout", help="how long to wait for the answer"),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Send a request to a run and print its answer (rejected: exit 1 with the reason)."""
    data = parse_json(data_text, "--data")
    durably = options(ctx).load()

    async def ask() -> Any:
        try:
            return await durably.request(
                run_id, name, data, timeout=timeout, idempotency_key=idempotency_key
            )
        except RequestRejected as exc:
            fail(f"rejected: {exc.reason}", 1)

    answer = run(ask(), durably)
    if json_out or not isinstance(answer, str):
        print_json(answer)
    else:
        typer.echo(answer)
