"""The shop's own tables (stock, payments, shipments), on the engine's database.

Step bodies write them in two ways: `step.transaction` bodies on the connection the
engine lends (the write commits with the step's record, exactly once), and plain
`step.run` bodies on a connection of their own, idempotently (a retried attempt writes
the same row again, keyed by the order). Both backends: `sqlite3` uses `?`, psycopg `%s`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import psycopg

TABLES = [
    "CREATE TABLE IF NOT EXISTS stock_holds (order_id TEXT PRIMARY KEY, skus TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS payments (order_id TEXT NOT NULL, kind TEXT NOT NULL, "
    "amount INTEGER NOT NULL, PRIMARY KEY (order_id, kind))",
    "CREATE TABLE IF NOT EXISTS shipments (order_id TEXT NOT NULL, sku TEXT NOT NULL, "
    "PRIMARY KEY (order_id, sku))",
]


def connect(url: str) -> Any:
    """A connection of the step's own (autocommit) to the database at `url`."""
    if url.startswith("sqlite:///"):
        return sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    return psycopg.connect(url, autocommit=True)


def execute(conn: Any, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run `query` (written with `?`) on either kind of synchronous connection."""
    if isinstance(conn, sqlite3.Connection):
        return list(conn.execute(query, params).fetchall())
    cur = conn.execute(query.replace("?", "%s"), params)
    return list(cur.fetchall()) if cur.description else []


async def execute_async(conn: Any, query: str, params: tuple[Any, ...] = ()) -> None:
    """Run `query` on the connection `step.transaction` lends (sqlite3, or psycopg async)."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute(query, params)
    else:
        await conn.execute(query.replace("?", "%s"), params)


def create_tables(url: str) -> None:
    with contextlib.closing(connect(url)) as conn:
        for statement in TABLES:
            execute(conn, statement)


def rows(url: str, table: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(connect(url)) as conn:
        return execute(conn, f"SELECT * FROM {table} ORDER BY 1, 2")
