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
from psycopg_pool import PoolClosed, PoolTimeout

Configure = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]


class LeaseConnection:
    """One autocommit connection, used by one caller at a time (`connection()`). Getting it
    fails as a pool's checkout does (`PoolTimeout`: not a lost connection, which would
    drain the engine's pools) when another caller holds it longer than `checkout_s`, or
    when it cannot be opened."""

    def __init__(self, conninfo: str, configure: Configure, checkout_s: float) -> None:
        self._conninfo = conninfo
        self._configure = configure
        self._checkout_s = checkout_s
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._stale = False  # drained while in use: closed once given back
        self._closed = False

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        try:
            async with asyncio.timeout(self._checkout_s):
                await self._lock.acquire()
                try:
                    conn = await self._open()
                except BaseException:
                    self._lock.release()
                    raise
        except TimeoutError:
            raise PoolTimeout(f"no lease connection within {self._checkout_s:g} s") from None
        try:
            yield conn
        finally:
            try:
                # A statement that failed or was cancelled may leave it mid-query: the next
                # renewal starts on a new one.
                if self._stale or conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    await self._close()
            finally:
                self._lock.release()

    async def _open(self) -> psycopg.AsyncConnection[Any]:
        if self._closed:
            raise PoolClosed("the lease connection is closed")
        if self._conn is not None and not (self._stale or self._conn.closed or self._conn.broken):
            return self._conn
        await self._close()
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        except psycopg.OperationalError as exc:
            raise PoolTimeout(f"cannot open the lease connection: {exc}") from exc
        try:
            await self._configure(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn

    async def drain(self) -> None:
        """Close the connection (the next renewal opens another); in use, once given back."""
        if self._lock.locked():
            self._stale = True
        else:
            await self._close()

    async def close(self) -> None:
        """Close it for good; in use, once given back."""
        self._closed = True
        await self.drain()

    async def _close(self) -> None:
        conn, self._conn, self._stale = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
