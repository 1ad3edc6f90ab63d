"""The one connection lease renewals go through, opened again at once whenever it is lost.

It was a pool of one. A pool opens a lost connection again on a schedule of its own that
backs off (1, 2, 4, 8 s...), and a pool of one never grows past it: after a PostgreSQL
restart of three seconds, the renewals waited for that schedule, not for the server, and
the leases of runs that were executing fine ran out (their steps ran again elsewhere). Here
the next renewal connects as soon as it is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg import pq

Configure = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]


class LeaseConnection:
    """One autocommit connection, used by one caller at a time (`connection()`)."""

    def __init__(self, conninfo: str, configure: Configure) -> None:
        self._conninfo = conninfo
        self._configure = configure
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._stale = False  # drained while in use: closed once given back

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._lock:
            if self._stale or self._conn is None or self._conn.closed or self._conn.broken:
                await self._close()
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                try:
                    await self._configure(conn)
                except BaseException:
                    await conn.close()
                    raise
                self._conn = conn
            try:
                yield self._conn
            finally:
                # A statement that failed or was cancelled may leave it mid-query: the next
                # renewal starts on a new one.
                if self._stale or self._conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    await self._close()

    async def drain(self) -> None:
        """Close the connection (the next renewal opens another); in use, once given back."""
        if self._lock.locked():
            self._stale = True
        else:
            await self._close()

    async def close(self) -> None:
        await self._close()

    async def _close(self) -> None:
        conn, self._conn, self._stale = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
