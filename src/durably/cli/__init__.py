"""The `durably` command line (SPEC §5)."""

from __future__ import annotations

import os

import typer

from . import admin, operating, runs
from ._common import Options

app = typer.Typer(
    help="durably: durable workflows on PostgreSQL and SQLite.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _global(
    ctx: typer.Context,
    database: str | None = typer.Option(
        None, "--database", envvar="DURABLY_DATABASE_URL",
        help="postgresql://… or sqlite:///file.db (default sqlite:///durably.db)",
    ),
    app_path: str | None = typer.Option(
        None, "--app", envvar="DURABLY_APP",
        help="module:attribute of the Durably object with the workflows",
    ),
    schema: str = typer.Option("durably", "--schema", envvar="DURABLY_SCHEMA",
                               help="schema (PostgreSQL) or table prefix (SQLite)"),
) -> None:  # fmt: skip
    ctx.obj = Options(database, app_path, schema)


admin.register(app)
runs.register(app)
operating.register(app)


def main() -> None:
    """Entry point of the `durably` script."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
