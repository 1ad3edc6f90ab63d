"""A clock that can jump forward, on the Python side and inside PostgreSQL.

SQLite reads the engine's clock through the SQL function `now()` it registers, so an
offset on the Python side moves both. PostgreSQL runs on its own clock: the environment
installs a schema with a function `now()` that adds the same offset (kept in a one-row
table) and puts that schema before `pg_catalog` in the connections' `search_path`, so
every unqualified `now()` in durably's queries reads the skipped time. Nothing in the
engine's SQL changes; a production database never sees this schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from ..core.clock import Clock


class SkippingClock(Clock):
    """The engine's clock plus an offset that only grows (`advance`)."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.waiters = 0  # callers inside `awaiting_result`
        self._watchers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def time(self) -> float:
        """Seconds since the Unix epoch, skipped time included."""
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        """Jump forward by `seconds` (monotonic time is left alone: it measures work)."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.offset += seconds

    def next_waiter(self) -> asyncio.Future[None]:
        """A future done when something next starts awaiting a run's result."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._watchers.append((loop, future))
        return future

    @contextlib.contextmanager
    def awaiting_result(self) -> Iterator[None]:
        self.waiters += 1
        watchers, self._watchers = self._watchers, []
        for loop, future in watchers:  # `app.sync` awaits on a loop of its own
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(_resolve, future)
        try:
            yield
        finally:
            self.waiters -= 1


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def test_schema(schema: str) -> str:
    """A new schema name for one environment's engine tables, derived from `schema`."""
    return f"{schema[:20]}_t{uuid.uuid4().hex[:10]}"


async def drop_schemas(url: str, schemas: list[str]) -> None:
    """Drop `schemas` and everything in them."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for schema in schemas:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )


def clock_schema(schema: str) -> str:
    """The schema that holds the skipping `now()` for durably schema `schema`."""
    return f"{schema}_testclock"


def with_search_path(url: str, schema: str) -> str:
    """`url` with `options=-c search_path=…` putting `schema` before `pg_catalog`."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    options = dict(parse_qsl(parts.query)).get("options", "")
    options = f"{options} -c search_path={schema},pg_catalog,public".strip()
    query_text = urlencode([*query, ("options", options)], quote_via=quote)  # %20, not +
    return urlunsplit(parts._replace(query=query_text))


async def install_pg_clock(url: str, schema: str) -> None:
    """Create (or reset to no offset) the skipping `now()` in schema `schema`."""
    name = sql.Identifier(schema)
    statements = [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.skew (one boolean PRIMARY KEY CHECK (one),"
            " seconds float8 NOT NULL)"
        ).format(name),
        sql.SQL(
            "INSERT INTO {}.skew VALUES (true, 0) ON CONFLICT (one) DO UPDATE SET seconds = 0"
        ).format(name),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {0}.now() RETURNS timestamptz LANGUAGE sql STABLE AS"
            " $$ SELECT pg_catalog.now() + (SELECT seconds FROM {0}.skew) * interval '1 second' $$"
        ).format(name),
    ]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(hashtext('durably:testclock'))")
        for statement in statements:
            await conn.execute(statement)


class PgOffset:
    """Sets the skipping `now()`'s offset in PostgreSQL, on one connection kept open (a
    test skips time thousands of times)."""

    def __init__(self, url: str, schema: str) -> None:
        self._url = url
        self._update = sql.SQL("UPDATE {}.skew SET seconds = %s").format(sql.Identifier(schema))
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def set(self, seconds: float) -> None:
        """Make the skipping `now()` run `seconds` ahead."""
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
        await self._conn.execute(self._update, (seconds,))

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
