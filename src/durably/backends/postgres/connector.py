"""PostgreSQL through psycopg 3: a pool of autocommit connections and one for LISTEN."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from ..._errors import DatabaseUnavailable
from .. import _queries
from .._base import Row

log = logging.getLogger("durably.postgres")


def _json_as_text(data: str | bytes) -> str:
    # The engine decodes JSON itself, lazily and the same way for both dialects.
    return data if isinstance(data, str) else data.decode()


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(_json_as_text, conn)


def _unavailable(exc: Exception) -> DatabaseUnavailable:
    return DatabaseUnavailable(f"PostgreSQL is unavailable: {str(exc).strip() or type(exc)}")


class PgTx:
    """A transaction on one connection (ours, or the caller's)."""

    def __init__(
        self, conn: Any, queries: dict[str, list[LiteralString]], external: bool = False
    ) -> None:
        self._conn = conn
        self._queries = queries
        self._external = external

    @property
    def connection(self) -> Any:
        return self._conn

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        rows: list[Row] = []
        for statement in self._queries[query]:
            cur = self._conn.cursor(row_factory=dict_row)
            if self._external:  # the caller's connection: leave its own loaders alone
                set_json_loads(_json_as_text, cur)
            result = cur.execute(statement, params)
            if isinstance(self._conn, psycopg.AsyncConnection):
                await result
                if cur.description is not None:
                    rows = await cur.fetchall()
            elif cur.description is not None:
                # The caller's sync connection (through durably.sync): a blocking call made
                # from the facade's own thread, never from a worker's event loop.
                rows = cur.fetchall()
        return rows


class PostgresConnector:
    """Runs durably's named queries on PostgreSQL."""

    dialect = "postgresql"

    def __init__(self, url: str, schema: str, pool_size: int = 10) -> None:
        self.url = url
        self.schema = schema
        self.channel = f"durably_{schema}"
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._queries: dict[str, list[LiteralString]] = {}
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        async with self._lock:
            if self._pool is not None:
                return
            try:
                async with await psycopg.AsyncConnection.connect(self.url) as conn:
                    self._queries = self._render(conn)
            except psycopg.OperationalError as exc:
                raise _unavailable(exc) from exc
            pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True},
                configure=_configure,
                open=False,
                reconnect_timeout=3600,
            )
            await pool.open()
            self._pool = pool

    def _render(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, list[LiteralString]]:
        schema = sql.Identifier(self.schema)
        rendered = {}
        for name, statements in _queries.load(__package__ or "", "pyformat").items():
            rendered[name] = [sql.SQL(s).format(schema=schema).as_string(conn) for s in statements]
        return rendered

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def migrate(self) -> list[str]:
        applied: list[str] = []
        try:
            async with (
                await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn,
                conn.transaction(),
            ):
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"durably:{self.schema}",)
                )
                schema = sql.Identifier(self.schema)
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                await conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.migrations (version integer PRIMARY"
                        " KEY, name text NOT NULL, applied_at timestamptz NOT NULL"
                        " DEFAULT now())"
                    ).format(schema)
                )
                cur = await conn.execute(
                    sql.SQL("SELECT version FROM {}.migrations").format(schema)
                )
                done = {row[0] for row in await cur.fetchall()}
                for version, name, text in _queries.migrations(f"{__package__}"):
                    if version in done:
                        continue
                    body = sql.SQL(text).format(schema=schema)
                    await conn.execute(body)
                    await conn.execute(
                        sql.SQL("INSERT INTO {}.migrations (version, name) VALUES (%s, %s)").format(
                            schema
                        ),
                        (version, name),
                    )
                    applied.append(name)
        except psycopg.OperationalError as exc:
            raise _unavailable(exc) from exc
        return applied

    @contextlib.asynccontextmanager
    async def transaction(self, external: Any = None) -> AsyncIterator[PgTx]:
        if external is not None:
            yield PgTx(external, await self._ensure_queries(), external=True)
            return
        pool = await self._ensure_pool()
        try:
            async with pool.connection() as conn, conn.transaction():
                yield PgTx(conn, self._queries)
        except psycopg.OperationalError as exc:
            raise _unavailable(exc) from exc

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        """One named query in a transaction of its own (autocommit: one round trip)."""
        pool = await self._ensure_pool()
        try:
            async with pool.connection() as conn:
                return await PgTx(conn, self._queries).fetch(query, **params)
        except psycopg.OperationalError as exc:
            raise _unavailable(exc) from exc

    async def _ensure_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        if self._pool is None:
            await self.open()
        assert self._pool is not None
        return self._pool

    async def _ensure_queries(self) -> dict[str, list[LiteralString]]:
        await self._ensure_pool()
        return self._queries

    async def listen(self, on_message: Callable[[str], None]) -> Callable[[], Awaitable[None]]:
        task = asyncio.create_task(self._listen_forever(on_message), name="durably-listen")

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        return stop

    async def _listen_forever(self, on_message: Callable[[str], None]) -> None:
        delay = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    delay = 0.1
                    # A reconnect may have missed notifications: look for work at once.
                    on_message("run")
                    async for note in conn.notifies():
                        on_message(note.payload)
            except psycopg.OperationalError as exc:
                log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def notify_local(self, message: str) -> None:
        # NOTIFY reaches every listener, this process's included.
        return
