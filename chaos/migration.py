"""A schema migration under running workers, as a deploy's `durably migrate` does it.

A column added to (then dropped from) the engine's tables changes their row type, so every
prepared statement of the workers that returns a whole row (`SELECT *`, `RETURNING *`) is
refused on its next use with "cached plan must not change result type" (SQLSTATE 0A000).
The engine must replace its connections and carry on; nothing else about the run changes.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
from psycopg import sql

# Tables whose whole rows the engine's prepared statements return: the claim and every read
# of a run (runs), a step's attempt and a run's history (step_attempts).
TABLES = ("runs", "step_attempts")
COLUMN = "chaos_n"

_ADD = "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} integer"
_DROP = "ALTER TABLE {table} DROP COLUMN IF EXISTS {column}"


class SchemaMigration:
    """Adds `COLUMN` to `TABLES` of the engine's schema, and drops it again.

    Args:
        url: the database (PostgreSQL).
        schema: the engine's schema.
    """

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.applied = False  # the column is there (or may be: an ADD whose reply was lost)

    async def add(self, within: float) -> bool:
        """Add the column; whether it was added within `within` seconds."""
        self.applied = True
        return await self._migrate(_ADD, within)

    async def drop(self, within: float) -> bool:
        """Drop the column; whether it was dropped within `within` seconds."""
        if await self._migrate(_DROP, within):
            self.applied = False
        return not self.applied

    async def _migrate(self, ddl: str, within: float) -> bool:
        """`ddl` on every table in one transaction, under the advisory lock `durably migrate`
        takes, tried again through lock timeouts, deadlocks and database restarts."""
        until = time.monotonic() + within
        key = f"durably:{self.schema}"  # the engine's migration lock (PostgresConnector)
        while True:
            try:
                async with (
                    await psycopg.AsyncConnection.connect(
                        self.url, autocommit=True, connect_timeout=5
                    ) as conn,
                    conn.transaction(),
                ):
                    # Queued for a table's lock, a migration holds up every statement queued
                    # behind it: behind a frozen worker's transaction, every worker past its
                    # lease. Careful deploys bound the wait and try again; so does this one.
                    await conn.execute("SET LOCAL lock_timeout = '1s'")
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
                    for table in TABLES:
                        await conn.execute(sql.SQL(ddl).format(
                            table=sql.Identifier(self.schema, table),
                            column=sql.Identifier(COLUMN),
                        ))  # fmt: skip
                return True
            except psycopg.Error:
                if time.monotonic() > until:
                    return False
                await asyncio.sleep(0.5)
