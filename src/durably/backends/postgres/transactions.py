"""The engine's transactions on one PostgreSQL connection: named queries, run at once or
queued in a pipeline (BEGIN with the first statement, COMMIT as its one round trip of its
own), on the engine's connections or on the caller's."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg
from psycopg import pq
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from ...core.errors import DatabaseUnavailable
from .._base import Fetched, Row, Sent

STATEMENT_S = 30.0  # one of the engine's own statements (they take milliseconds)


def json_as_text(data: str | bytes) -> str:
    # The engine decodes JSON itself, lazily and the same way for both dialects.
    return data if isinstance(data, str) else data.decode()


@dataclass(frozen=True)
class Queries:
    """The named queries rendered for one schema, those planned each call, and those
    that wait without the engine's deadline (`STATEMENT_S`) for the locks they take."""

    sql: dict[str, list[LiteralString]]
    each_call: frozenset[str]
    no_deadline: frozenset[str] = frozenset()


class PgTx:
    """A transaction on one connection (ours, or the caller's)."""

    def __init__(
        self,
        conn: Any,
        queries: Queries,
        external: bool = False,
        pipeline: psycopg.AsyncPipeline | None = None,
    ) -> None:
        self._conn = conn
        self._queries = queries
        self._external = external
        self._pipeline = pipeline

    def _prepare(self, query: str) -> bool | None:
        """Prepared on first use, but on the caller's connection (psycopg's own rule) and
        for a query planned with its parameters each call (`-- plan: each call`)."""
        if self._external:
            return None
        return query not in self._queries.each_call

    @property
    def connection(self) -> Any:
        return self._conn

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        result = fn(self._conn, *args)
        result = await result if inspect.isawaitable(result) else result
        if not self._external:
            _check_returned(self._conn)
        return result

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        if self._external or query in self._queries.no_deadline:
            return await self._fetch(query, params)
        try:
            async with asyncio.timeout(STATEMENT_S):
                return await self._fetch(query, params)
        except TimeoutError as exc:
            raise DatabaseUnavailable(
                f"PostgreSQL did not answer within {STATEMENT_S:g} s ({query})"
            ) from exc

    async def send(self, query: str, **params: Any) -> Sent:
        if self._pipeline is None:
            return Fetched(await self.fetch(query, **params))
        cursors = []
        for statement in self._queries.sql[query]:  # queued: nothing waits for the server
            cur = self._conn.cursor(row_factory=dict_row)
            await cur.execute(statement, params, prepare=self._prepare(query))
            cursors.append(cur)
        return _Queued(cursors, self._pipeline)

    async def _fetch(self, query: str, params: dict[str, Any]) -> list[Row]:
        rows: list[Row] = []
        for statement in self._queries.sql[query]:
            cur = self._conn.cursor(row_factory=dict_row)
            if self._external:  # the caller's connection: leave its own loaders alone
                set_json_loads(json_as_text, cur)
            result = cur.execute(statement, params, prepare=self._prepare(query))
            if isinstance(self._conn, psycopg.AsyncConnection):
                await result
                if self._pipeline is not None:  # what was queued goes now, with this
                    await self._pipeline.sync()
                if _returns_rows(cur):
                    rows = await cur.fetchall()
            elif _returns_rows(cur):
                # The caller's sync connection (through durably.sync): a blocking call made
                # from the facade's own thread, never from a worker's event loop.
                rows = cur.fetchall()
        return rows


class _Queued:
    """A statement queued in a pipeline: its rows, once they have arrived (the pipeline
    is synced for them if they have not)."""

    def __init__(
        self, cursors: list[psycopg.AsyncCursor[Row]], pipeline: psycopg.AsyncPipeline
    ) -> None:
        self._cursors = cursors
        self._pipeline = pipeline

    async def rows(self) -> list[Row]:
        if any(cur.pgresult is None for cur in self._cursors):
            await self._pipeline.sync()
        rows: list[Row] = []
        for cur in self._cursors:
            if _returns_rows(cur):
                rows = await cur.fetchall()
        return rows


def _check_returned(conn: psycopg.AsyncConnection[Any]) -> None:
    """A body returned: fail it, as its own error, if it left no transaction for the step's
    record. psycopg refuses commit() and rollback() in a `transaction()` block, but not
    close() nor SQL of the body's own (COMMIT, ROLLBACK). Closed, the record would fail as
    the database's failure (the attempt never recorded, the run claimed and its body run
    again, for ever); after a COMMIT it would go in a transaction of its own, the body's
    writes committed before the lease was checked. A connection lost (`broken`) is the
    database's failure indeed."""
    if conn.closed and not conn.broken:
        what = "close() its connection"
    elif conn.info.transaction_status == pq.TransactionStatus.IDLE:
        what = "end the step's transaction (COMMIT, ROLLBACK)"
    else:
        return
    raise psycopg.ProgrammingError(
        f"a step.transaction body cannot {what}; the engine commits the body's writes with "
        "the step's record, and rolls them back if the body raises"
    )


def _returns_rows(cur: Any) -> bool:
    """Whether the statement returned rows, as `cur.description is not None` says, without
    building that description: a Column object for each column, on every call (a run's
    row has thirty), was a quarter of the Python a fetch costs."""
    result = cur.pgresult
    return result is not None and (result.nfields > 0 or result.status == pq.ExecStatus.TUPLES_OK)


async def _roll_back(conn: psycopg.AsyncConnection[Any]) -> None:
    """End a transaction of ours that failed, if the connection is still in it."""
    if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            await conn.execute("ROLLBACK")


@contextlib.asynccontextmanager
async def pipelined_transaction(
    conn: psycopg.AsyncConnection[Any],
) -> AsyncIterator[psycopg.AsyncPipeline]:
    """A transaction in pipeline mode whose BEGIN goes with the first statement and whose
    COMMIT is its one round trip of its own. (psycopg's `transaction()` syncs the pipeline
    on the way in and three times on the way out.)"""
    try:
        async with conn.pipeline() as pipeline:
            await conn.execute("BEGIN")
            yield pipeline
            await conn.execute("COMMIT")  # sent, and its answer read, as the pipeline ends
    except BaseException:
        await _roll_back(conn)
        raise
