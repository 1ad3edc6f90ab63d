"""Applying a PostgreSQL schema's migrations (`migrations/NNNN_*.sql`), one process at a
time, beside running workers: of this release, and of the previous one during a deploy.

A migration waits for each table lock briefly and tries again (a lock request queued behind
a long transaction would hold up every statement on the table behind it); one marked
`-- durably: no transaction` runs statement by statement, so that it can build an index
CONCURRENTLY without holding up any write; one with a line `-- durably: then outside a
transaction` runs what is above it in its transaction and what follows statement by
statement once that committed (a column, then its index built CONCURRENTLY).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from typing import Any

import psycopg
from psycopg import sql

from ...core.errors import DatabaseUnavailable
from .. import _queries

# Jitter from a generator of the engine's own: the global one is the program's (seeded by
# tests, hypothesis included), and the engine's threads would draw from it.
_JITTER = random.Random()

log = logging.getLogger("durably.postgres")

MIGRATION_LOCK_S = 1.0  # a migration's wait for one table lock, before it tries again
MIGRATION_PATIENCE_S = 600.0  # how long a migration keeps trying
# A statement of a `-- durably: no transaction` migration that runs outside any transaction.
_CONCURRENTLY = re.compile(r"\bCONCURRENTLY\b", re.IGNORECASE)
# The index a statement of a `-- durably: no transaction` migration builds concurrently.
_CONCURRENT_BUILD = re.compile(
    r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+(\w+)\s", re.IGNORECASE
)


class Migrator:
    """The migrations of one schema, applied on a connection of their own."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self.schema = schema

    async def migrate(self) -> list[str]:
        """Apply the migrations not yet applied; the names of those it applied.

        One connection holds the schema's migration lock throughout (`_lock_migrations`).
        Ordinary migrations in a row are applied in one transaction; a `-- durably: no
        transaction` one statement by statement (`_apply_outside`). Each is recorded in
        `migrations` once all its statements ran: in the transaction of the last one, or
        just after it for one outside a transaction.

        In a transaction, its wait for each table lock is short (`MIGRATION_LOCK_S`), then
        it tries again: a lock request queued behind a long transaction (a
        `step.transaction` body, a frozen worker's) would hold up every statement on that
        table behind it, the workers' heartbeats included. It gives up after
        `MIGRATION_PATIENCE_S`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MIGRATION_PATIENCE_S
        applied: list[str] = []
        while True:
            try:
                await self._migrate_once(applied)
                return applied
            except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
                # A deadlock: a concurrent index build waits for every older snapshot to
                # end, among them that of an older release's migrator waiting for the lock
                # in its transaction (see `_lock_migrations`); the server aborts one.
                if loop.time() >= deadline:
                    raise DatabaseUnavailable(
                        f"could not migrate schema {self.schema!r}: for "
                        f"{MIGRATION_PATIENCE_S:g} s another transaction held a lock the "
                        f"migration needs ({str(exc).strip()})"
                    ) from exc
                log.warning("migrating: a table is locked by another transaction; trying "
                            "again (%s)", str(exc).strip())  # fmt: skip
                await asyncio.sleep(_JITTER.uniform(0.1, 0.5))

    async def _migrate_once(self, applied: list[str]) -> None:
        """Apply what is not applied yet, adding the name of each to `applied` once it is
        committed."""
        schema = sql.Identifier(self.schema)
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
            if await self._all_applied(conn):
                return
            await self._lock_migrations(conn)  # released as the connection closes
            async with conn.transaction():
                await self._exclude_older_releases(conn)
                await self._short_lock_waits(conn)
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                await conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.migrations (version integer PRIMARY"
                        " KEY, name text NOT NULL, applied_at timestamptz NOT NULL"
                        " DEFAULT now())"
                    ).format(schema)
                )
                done = await self._versions(conn)
            pending = [m for m in _queries.migrations(f"{__package__}") if m[0] not in done]
            while pending:
                version, name, text = pending.pop(0)
                if _queries.outside_transaction(text):
                    await self._apply_outside(conn, version, name, text)
                    applied.append(name)
                    continue
                batch = [(version, name, text)]
                while (pending and not _queries.outside_transaction(pending[0][2])
                       and _queries.then_outside(batch[-1][2])[1] is None):  # fmt: skip
                    batch.append(pending.pop(0))
                tail: str | None = None
                async with conn.transaction():
                    await self._exclude_older_releases(conn)
                    await self._short_lock_waits(conn)
                    done = await self._versions(conn)  # an older release's too
                    batch = [m for m in batch if m[0] not in done]
                    for version, name, text in batch:
                        head, tail = _queries.then_outside(text)
                        await conn.execute(sql.SQL(head).format(schema=schema))
                        if tail is None:
                            await self._record(conn, version, name)
                if tail is not None:  # the last of the batch: recorded once its tail ran
                    await self._apply_outside(conn, version, name, tail)
                applied.extend(name for _, name, _ in batch)

    async def _all_applied(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Whether every migration of this release is applied already: then opening an app
        (every CLI call) is one read, with no lock and no DDL (a newer release's migrations
        may be applied too: they are no concern of this one)."""
        try:
            done = await self._versions(conn)
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return False  # a new schema
        return all(m[0] in done for m in _queries.migrations(f"{__package__}"))

    async def _versions(self, conn: psycopg.AsyncConnection[Any]) -> set[int]:
        """The versions recorded as applied."""
        query = sql.SQL("SELECT version FROM {}.migrations").format(sql.Identifier(self.schema))
        return {row[0] for row in await (await conn.execute(query)).fetchall()}

    async def _lock_migrations(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Take the schema's migration lock for the session, against the migrators of this
        release. Tried again and again, not waited for: a statement waiting for it holds a
        snapshot, and a concurrent index build by the holder waits for every older snapshot
        to end; the server would abort one of the two as a deadlock.

        Not the key an older release takes (in its migration's transaction, waiting there):
        that one is taken only by this release's transactions (`_exclude_older_releases`),
        never held through a concurrent build, which an older migrator waiting for it would
        have deadlocked (review: either it failed to start, or the build was thrown away)."""
        key = f"durably-migrate:{self.schema}"
        told = False
        while True:
            cur = await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,))
            row = await cur.fetchone()
            if row is not None and row[0]:
                return
            if not told:
                log.info("migrating: waiting for another migration of schema %r", self.schema)
                told = True
            await asyncio.sleep(_JITTER.uniform(0.05, 0.25))

    async def _exclude_older_releases(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """In a transaction of the migration: the lock an older release's migrator takes
        for its transaction, until this one ends (it applies nothing this one applies, and
        re-reads what is applied once it has the lock)."""
        key = f"durably:{self.schema}"
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))

    async def _short_lock_waits(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(f"SET LOCAL lock_timeout = '{MIGRATION_LOCK_S * 1000:g}ms'")

    async def _record(self, conn: psycopg.AsyncConnection[Any], version: int, name: str) -> None:
        await conn.execute(
            sql.SQL("INSERT INTO {}.migrations (version, name) VALUES (%s, %s)").format(
                sql.Identifier(self.schema)
            ),
            (version, name),
        )

    async def _apply_outside(
        self, conn: psycopg.AsyncConnection[Any], version: int, name: str, text: str
    ) -> None:
        """A `-- durably: no transaction` migration: each statement on its own, a
        concurrent build or drop waiting for locks as long as the server's lock_timeout
        says (it waits for the transactions before it without holding up any other
        statement on the table), any other statement in a transaction with short lock
        waits; then the record.

        Stopped half-way (a crash, a lost connection), it is run again from the top: each
        statement must be a no-op once done (IF [NOT] EXISTS). A concurrent build stopped
        half-way leaves an invalid index behind, which IF NOT EXISTS would keep: one of the
        name a `CREATE INDEX CONCURRENTLY IF NOT EXISTS` builds is dropped first."""
        schema = sql.Identifier(self.schema)
        for statement in _queries.statements(text):
            built = _CONCURRENT_BUILD.match(statement)
            if built is not None:
                await self._drop_if_invalid(conn, built.group(1))
            query = sql.SQL(statement).format(schema=schema)
            if _CONCURRENTLY.search(statement):
                await conn.execute(query)
                continue
            # Any other statement (a column added) takes its table lock in a transaction
            # with the short lock waits of `migrate`: queued behind a long transaction, it
            # would hold up every statement on the table behind it.
            async with conn.transaction():
                await self._short_lock_waits(conn)
                await conn.execute(query)
        await self._record(conn, version, name)

    async def _drop_if_invalid(self, conn: psycopg.AsyncConnection[Any], index: str) -> None:
        cur = await conn.execute(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = %s",
            (self.schema, index),
        )
        row = await cur.fetchone()
        if row is not None and row[0]:
            log.warning("migrating: dropping index %s.%s, left invalid by an interrupted "
                        "build, to build it again", self.schema, index)  # fmt: skip
            await conn.execute(
                sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(
                    sql.Identifier(self.schema), sql.Identifier(index)
                )
            )
