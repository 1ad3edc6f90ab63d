"""PostgreSQL through psycopg 3: two pools of autocommit connections and one of its own
for lease renewals (`_Pools`: the engine's statements, planned once; the renewals, see
`lease.py`; `step.transaction` bodies and operator queries, planned as the server says) and
one connection for LISTEN. The transactions on a
connection are in `transactions.py`.

What the engine makes of a driver error (`classify`):

    connection lost or refused, server shutting down,    DatabaseUnavailable: the worker
    too many connections, no answer in time              backs off and carries on
    deadlock or serialization failure; a prepared        DatabaseConflict: run again a
    statement the schema changed under (every pooled     few times (a statement of its
    connection is replaced)                              own here; a transaction through
                                                         `retrying`), then said so
    anything else (bad data, a constraint, a bug)        raised as it is

A silent network must not hold the engine forever: connections are opened with a connect
timeout and TCP keepalives, a pool checkout waits at most `CHECKOUT_S`, and each of the
engine's own statements at most `STATEMENT_S` (client side: a server-wide statement_timeout
would also cut the user's long `step.transaction` bodies, which get no deadline here).
Except a signal's send (`-- deadline: none`): it waits for its name's lock as long as another
transaction holds it (a caller's own, open), as a transaction's COMMIT waits; a caller that
wants a limit sets it (`asyncio.timeout`: the statement is cancelled, nothing is sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...core.errors import ConfigurationError, DatabaseConflict, DatabaseUnavailable
from .. import _queries
from .._base import LISTENING, Row
from .lease import LeaseConnection
from .migrator import Migrator
from .transactions import PgTx, Queries, json_as_text, pipelined_transaction

# Jitter from a generator of the engine's own: the global one is the program's (seeded by
# tests, hypothesis included), and the engine's threads would draw from it.
_JITTER = random.Random()

log = logging.getLogger("durably.postgres")
T = TypeVar("T")


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(json_as_text, conn)


async def _configure_engine(conn: psycopg.AsyncConnection[Any]) -> None:
    await _configure(conn)
    # The engine's statements are few, run all the time, and fit one plan each: planned
    # once (PostgreSQL would plan some of them again for every call, 0.3-0.5 ms each).
    # The setting holds for every statement with parameters, prepared or not: what must
    # be planned otherwise (a user's body, an operator's query) runs on `_Pools.plain`.
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    # A plan made once lasts the connection's life, whatever the tables grow to: one made
    # on a fresh schema (the planner counts 10 pages of runs) read the runs a claim locked
    # by a scan of the table, and went on doing so, 100k runs later, until an ANALYZE
    # (issue 26 item 15). Every statement here reads its rows by index; a table with none
    # that serves it (workers, queues: a few rows) is still scanned.
    await conn.execute("SET enable_seqscan = off")
    # Which makes a statement that can only scan (queues, workers) cost about 1e10, over
    # any jit_above_cost: with the server's JIT on, `next_due` (run by an idle worker after
    # every empty claim) was compiled on every call, 100 ms for 0.25 ms of work. The
    # engine's statements are small and planned once; none gains from JIT.
    await conn.execute("SET jit = off")


Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]


@dataclass(frozen=True)
class _Pools:
    """The connector's connections."""

    engine: Pool  # the engine's own statements, planned once each, generically
    lease: LeaseConnection  # lease renewals: queued behind the step records of 50 runs for
    # an engine connection, they took over a second on a busy machine, and the leases ran out
    plain: Pool  # planned as the server says: `step.transaction` bodies and the operator
    # queries whose plan depends on their parameters (`-- plan: each call`); opened as used

    def all(self) -> tuple[Pool | LeaseConnection, ...]:
        return (self.engine, self.lease, self.plain)


# Connection defaults a URL may override: notice a dead peer in about 20 s, not hours.
CONNECTION_DEFAULTS = {"connect_timeout": "10", "keepalives": "1", "keepalives_idle": "10",
                       "keepalives_interval": "3", "keepalives_count": "3"}  # fmt: skip
CHECKOUT_S = 10.0  # waiting for a pooled connection
CONFLICT_TRIES = 4  # a statement aborted as a deadlock or serialization failure

# SQLSTATEs of a server that cannot serve now: shutting down or starting, out of resources.
_UNAVAILABLE_STATES = ("57P01", "57P02", "57P03", "53")


def with_defaults(url: str) -> str:
    """`url` with `CONNECTION_DEFAULTS` for whatever it does not set itself."""
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"invalid PostgreSQL URL: {_text(exc)}") from None
    extra = {k: v for k, v in CONNECTION_DEFAULTS.items() if k not in given}
    return make_conninfo(url, **extra)


def classify(exc: psycopg.Error) -> Exception:
    """The error the engine sees for a driver error: `DatabaseUnavailable` for what passes
    by itself, `exc` itself for the rest (see the module docstring)."""
    state = exc.sqlstate or ""
    if _conflict(exc):
        return DatabaseConflict(
            f"PostgreSQL aborted the transaction as a deadlock or serialization failure "
            f"({state}): {_text(exc)}"
        )
    if isinstance(exc, psycopg.OperationalError) and (
        not state or state.startswith(("08", *_UNAVAILABLE_STATES))
    ):
        return DatabaseUnavailable(f"PostgreSQL is unavailable: {_text(exc)}")
    return exc


def _connection_lost(exc: psycopg.Error) -> bool:
    """The connection failed (closed by the server, reset, refused), not the statement on
    it: not a conflict, not a pool with no connection to give (`PoolTimeout`)."""
    state = exc.sqlstate or ""
    return (
        isinstance(exc, psycopg.OperationalError)
        and not isinstance(exc, PoolTimeout)
        and (not state or state.startswith(("08", "57P0")))
    )


def _stale_statement(exc: psycopg.Error) -> bool:
    """A prepared statement the schema changed under (a migration by another process):
    "cached plan must not change result type" (0A000), or one gone (26000). psycopg keeps
    it on the connection, so every later use there fails the same way."""
    return exc.sqlstate in ("0A000", "26000")


def _conflict(exc: psycopg.Error) -> bool:
    """A deadlock or serialization failure: SQLSTATE class 40 (psycopg's classes for them,
    DeadlockDetected and SerializationFailure, do not derive from TransactionRollback)."""
    return (exc.sqlstate or "").startswith("40")


def _text(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


def _raise_classified(exc: psycopg.Error) -> NoReturn:
    translated = classify(exc)
    if translated is exc:
        raise exc
    raise translated from exc


class PostgresConnector:
    """Runs durably's named queries on PostgreSQL."""

    dialect = "postgresql"

    def __init__(
        self, url: str, schema: str, pool_size: int = 10, checkout_s: float = CHECKOUT_S
    ) -> None:
        self.url = url
        self._checkout_s = checkout_s
        self._conninfo = with_defaults(url)
        self.schema = schema
        self.channel = f"durably_{schema}"
        self._pool_size = pool_size
        self._pools: _Pools | None = None
        self._queries = Queries({}, frozenset())
        self._lock = asyncio.Lock()
        self._closed = False

    async def open(self) -> None:
        async with self._lock:
            self._closed = False
            if self._pools is not None:
                return
            try:
                async with await psycopg.AsyncConnection.connect(self._conninfo) as conn:
                    self._queries = self._render(conn)
            except psycopg.OperationalError as exc:
                raise DatabaseUnavailable(f"PostgreSQL is unavailable: {_text(exc)}") from exc
            self._pools = _Pools(
                engine=await self._open_pool(1, self._pool_size, _configure_engine),
                lease=LeaseConnection(self._conninfo, _configure_engine, self._checkout_s),
                plain=await self._open_pool(0, self._pool_size, _configure),
            )

    async def _open_pool(
        self,
        min_size: int,
        max_size: int,
        configure: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]],
    ) -> Pool:
        pool: Pool = AsyncConnectionPool(
            self._conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            configure=configure,
            open=False,
            timeout=self._checkout_s,
            reconnect_timeout=3600,
        )
        await pool.open()
        return pool

    def _render(self, conn: psycopg.AsyncConnection[Any]) -> Queries:
        schema = sql.Identifier(self.schema)
        package = __package__ or ""
        rendered = {}
        for name, statements in _queries.load(package, "pyformat").items():
            rendered[name] = [sql.SQL(s).format(schema=schema).as_string(conn) for s in statements]
        return Queries(
            rendered,
            each_call=frozenset(_queries.marked(package, "plan: each call")),
            no_deadline=frozenset(_queries.marked(package, "deadline: none")),
        )

    async def close(self) -> None:
        self._closed = True
        pools, self._pools = self._pools, None
        if pools is not None:  # each closed, whatever another one's close raises
            await asyncio.gather(*(pool.close() for pool in pools.all()), return_exceptions=True)

    async def migrate(self) -> list[str]:
        """Apply the migrations not yet applied; the names of those it applied (`Migrator`)."""
        try:
            return await Migrator(self._conninfo, self.schema).migrate()
        except psycopg.Error as exc:
            _raise_classified(exc)

    @contextlib.asynccontextmanager
    async def transaction(
        self, external: Any = None, *, pipelined: bool = True
    ) -> AsyncIterator[PgTx]:
        if external is not None:
            yield PgTx(external, await self._ensure_queries(), external=True)
            return
        pools = await self._ensure_pools()
        try:
            if pipelined:
                async with (
                    pools.engine.connection() as conn,
                    pipelined_transaction(conn) as pipeline,
                ):
                    yield PgTx(conn, self._queries, pipeline=pipeline)
            else:  # a body's: its statements are planned as the server says
                async with pools.plain.connection() as conn, conn.transaction():
                    yield PgTx(conn, self._queries)
        except psycopg.Error as exc:  # the engine's statements, the commit, or the body's
            await self._raise_for(exc)

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        """One named query in a transaction of its own (autocommit: one round trip), run
        again as `retrying` says."""
        pools = await self._ensure_pools()
        pool: Pool | LeaseConnection = pools.engine
        if query == "heartbeat":
            pool = pools.lease
        elif query in self._queries.each_call:
            pool = pools.plain

        async def once() -> list[Row]:
            try:
                async with pool.connection() as conn:
                    return await PgTx(conn, self._queries).fetch(query, **params)
            except psycopg.Error as exc:
                await self._raise_for(exc)

        return await self.retrying(once, query)

    async def retrying(self, work: Callable[[], Awaitable[T]], what: str) -> T:
        """`work` (a statement or a transaction of its own), run again after a short,
        jittered pause when PostgreSQL aborted it whole (`DatabaseConflict`: a deadlock, a
        serialization failure, a statement the schema changed under), up to
        `CONFLICT_TRIES` times in all."""
        tries = 1
        while True:
            try:
                return await work()
            except DatabaseConflict as exc:
                if tries >= CONFLICT_TRIES:
                    cause = exc.__cause__ or exc
                    raise DatabaseConflict(
                        f"PostgreSQL aborted {what} {tries} times in a row as a deadlock or "
                        f"serialization failure ({getattr(cause, 'sqlstate', '')}): "
                        f"{_text(cause)}"
                    ) from cause
                log.info("%s: %s; trying again", what, exc)
                await asyncio.sleep(_JITTER.uniform(0.005, 0.02) * 2**tries)
                tries += 1

    async def _raise_for(self, exc: psycopg.Error) -> NoReturn:
        """Raise what the engine makes of `exc` (`classify`). A statement the schema
        changed under (a migration by another process) is stale on every pooled
        connection: they are all replaced, and it is a conflict (run it again)."""
        if _stale_statement(exc):
            log.warning(
                "the schema changed under the engine's prepared statements (a "
                "migration by another process?); replacing the pool's connections"
            )
            for pool in self._pools.all() if self._pools is not None else ():
                with contextlib.suppress(psycopg.Error):  # one in use: closed when back
                    await pool.drain()
            raise DatabaseConflict(f"the schema changed under a statement: {_text(exc)}") from exc
        if _connection_lost(exc) and self._pools is not None:
            # Most likely with every idle one (a server restart): each would fail one
            # statement of the engine's, and a run whose write fails is left to be claimed
            # again, a lease later. They are closed and replaced now, without a round trip
            # (a test of each would wait on any that is silent), before the error is raised.
            for pool in self._pools.all():
                with contextlib.suppress(psycopg.Error):
                    await pool.drain()
        _raise_classified(exc)

    async def _ensure_pools(self) -> _Pools:
        if self._pools is None:
            if self._closed:  # a task that outlived close() must not open a new pool
                raise DatabaseUnavailable("the app is closed (Durably.close())")
            await self.open()
        assert self._pools is not None
        return self._pools

    async def _ensure_queries(self) -> Queries:
        await self._ensure_pools()
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
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    delay = 0.1
                    # A reconnect may have missed notifications: look again at once.
                    on_message(LISTENING)
                    async for note in conn.notifies():
                        on_message(note.payload)
            except psycopg.OperationalError as exc:
                log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def notify_local(self, message: str) -> None:
        # NOTIFY reaches every listener, this process's included.
        return
