"""What every command shares: the app to act on, JSON input, errors as one line."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer

from ..client import documents
from ..client.app import DEFAULT_URL
from ..client.durably import Durably
from ..core.codec import parse
from ..core.errors import (
    ConfigurationError,
    DurablyError,
    IdempotencyConflictError,
    InvalidInput,
    RunNotFound,
    SignalNotFound,
    WorkflowNotFound,
)

T = TypeVar("T")

# Errors in what the user typed exit 2, like a usage error; the rest exit 1.
INPUT_ERRORS = (ConfigurationError, InvalidInput, WorkflowNotFound, RunNotFound,
                IdempotencyConflictError, SignalNotFound)  # fmt: skip


@dataclass
class Options:
    database: str | None
    app_path: str | None
    schema: str
    read_database: str | None = None  # a replica for the reads (`Durably(read_url=)`)

    def load(self, need_app: bool = False, read_only: bool = False) -> Durably:
        """The user's app (from --app), pointed at --database; or a bare one. A command
        that only reads opens a SQLite file read-only: it never creates one."""
        try:
            return self._load(need_app, read_only)
        except DurablyError as exc:
            fail(str(exc), 2 if isinstance(exc, INPUT_ERRORS) else 1)

    def _load(self, need_app: bool, read_only: bool) -> Durably:
        if self.app_path:
            app = _import_app(self.app_path)
            url = _for_reading(self.database or app.url) if read_only else self.database
            if (url and url != app.url) or self.read_database:
                app = app.rebind(url or app.url, read_url=self.read_database)
            return app
        if need_app:
            fail("this command needs the workflows: pass --app module:attribute "
                 "(or set DURABLY_APP)", 2)  # fmt: skip
        url = self.database or DEFAULT_URL
        return Durably(_for_reading(url) if read_only else url, schema=self.schema,
                       read_url=self.read_database)  # fmt: skip


def _for_reading(url: str) -> str:
    """A SQLite URL opened read-only (other databases are left as they are)."""
    if url.startswith("sqlite://") and "?" not in url:
        return f"{url}?mode=ro"
    return url


def _import_app(path: str) -> Durably:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        fail(f"--app must look like module:attribute, not {path!r}", 2)
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        fail(f"cannot import {module_name!r} for --app: {exc}", 2)
    app = getattr(module, attribute, None)
    if not isinstance(app, Durably):
        fail(f"{path!r} is not a durably.Durably object", 2)
    return app


class CommandError(Exception):
    """Why a command stops, for the user, and its exit code (`report` prints it)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def fail(message: str, code: int = 1) -> NoReturn:
    """Stop the command: `main` reports `message` and exits with `code`."""
    raise CommandError(message, code)


def report(message: str, code: int, as_json: bool) -> NoReturn:
    """An error as one line on stderr (with --json, the JSON document `{"error", "exit"}`),
    and exit with `code`: what `main` does with every error of every command."""
    doc = documents.error(message)
    if as_json:
        typer.echo(json.dumps({**doc, "exit": code}), err=True)
    else:
        typer.echo(f"error: {doc['error']}", err=True)
    sys.exit(code)


def run(coro: Coroutine[Any, Any, T], app: Durably | None = None) -> T:
    """Run a command's coroutine (then close `app`); DurablyErrors become one line and an
    exit code."""

    async def main() -> T:
        try:
            return await coro
        finally:
            if app is not None:
                await app.close()

    try:
        return asyncio.run(main())
    except DurablyError as exc:
        fail(str(exc), 2 if isinstance(exc, INPUT_ERRORS) else 1)
    except KeyboardInterrupt:
        fail("interrupted", 130)


def parse_json(text: str | None, what: str) -> Any:
    """JSON text, or @file with JSON in it; exit 2 on anything else (SPEC §4.20)."""
    if text is None:
        return None
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            fail(f"cannot read {what} file {text[1:]!r}: {exc.strerror}", 2)
    try:
        return parse(text, what)  # NaN, Infinity and NUL refused here, before any write
    except InvalidInput as exc:
        fail(str(exc), 2)


def print_json(data: Any) -> None:
    typer.echo(documents.text(data, indent=2))


def options(ctx: typer.Context) -> Options:
    """The global options of this invocation."""
    opts: Options = ctx.obj
    return opts
