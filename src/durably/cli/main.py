"""The `durably` command line (SPEC §5): the typer app, its global options, `main`."""

from __future__ import annotations

import os
import sys
from importlib import metadata

import typer

from . import admin, operating, requests, runs, serving, streams
from ._common import CommandError, Options, report

# The exceptions of the click that typer runs on (its own copy in recent versions).
_CLICK = sys.modules[typer.BadParameter.__module__]

app = typer.Typer(
    help="durably: durable workflows on PostgreSQL and SQLite.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(show: bool) -> None:
    if show:
        typer.echo(f"durably {metadata.version('durably')}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    _: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                           help="print the installed version and exit"),
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
    read_database: str | None = typer.Option(
        None, "--read-database", envvar="DURABLY_READ_DATABASE_URL",
        help="postgresql://… of a streaming replica: listings, show, the dashboard's pages "
             "and the API's GET routes read it (writes go to --database)",
    ),
) -> None:  # fmt: skip
    ctx.obj = Options(database, app_path, schema, read_database)


admin.register(app)
runs.register(app)
operating.register(app)
serving.register(app)
streams.register(app)
requests.register(app)


def main() -> None:
    """Entry point of the `durably` script. Every error of a command ends here, as one line
    on stderr and an exit code (`report`); with `--json`, usage errors too (the parser's
    own report is a box of several lines)."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    args = hoist_global_options(sys.argv[1:])
    as_json = "--json" in (args[: args.index("--")] if "--" in args else args)
    try:
        code = app(args=args, standalone_mode=not as_json)
    except CommandError as exc:
        report(exc.message, exc.code, as_json)
    except _CLICK.ClickException as exc:  # with --json only: standalone, click reports them
        report(exc.format_message(), exc.exit_code, as_json)
    sys.exit(code if isinstance(code, int) else 0)


GLOBAL_OPTIONS = ("--database", "--app", "--schema", "--read-database")


def hoist_global_options(args: list[str]) -> list[str]:
    """The global options given after the subcommand (`durably worker --app x`), moved
    before it, where the parser looks for them; everything else stays in order."""
    hoisted: list[str] = []
    rest: list[str] = []
    command_at: int | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name, has_value, _ = arg.partition("=")
        width = 1 if has_value else 2
        if name in GLOBAL_OPTIONS:
            (rest if command_at is None else hoisted).extend(args[i : i + width])
            i += width
            continue
        if command_at is None and not arg.startswith("-"):
            command_at = len(rest)
        rest.append(arg)
        i += 1
    if command_at is None:
        return args
    return rest[:command_at] + hoisted + rest[command_at:]
