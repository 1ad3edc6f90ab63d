"""The application's own table: what is in the library. It lives beside durably's tables,
in schema `acquire` on PostgreSQL (table `acquire_library` on SQLite)."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
from psycopg.rows import dict_row

_SQLITE = """CREATE TABLE IF NOT EXISTS acquire_library (
    order_id TEXT PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL,
    sha256 TEXT NOT NULL, run_id TEXT NOT NULL,
    registered_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0))"""
_POSTGRES = [
    "CREATE SCHEMA IF NOT EXISTS acquire",
    """CREATE TABLE IF NOT EXISTS acquire.library (
    order_id text PRIMARY KEY, path text NOT NULL, size bigint NOT NULL,
    sha256 text NOT NULL, run_id text NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now())""",
]


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite://").removeprefix("/")


def ensure_tables(url: str) -> None:
    """Create the library table if it is not there (idempotent)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(url), timeout=30) as lite:
            lite.execute(_SQLITE)
        return
    with psycopg.connect(url) as pg, pg.transaction():
        # CREATE ... IF NOT EXISTS races with itself; serialize the processes that run it.
        pg.execute("SELECT pg_advisory_xact_lock(hashtext('acquire:tables'))")
        for statement in _POSTGRES:
            pg.execute(statement)


async def register(conn: Any, entry: dict[str, Any]) -> dict[str, Any]:
    """Insert one library row in the step's transaction (see `ctx.step.transaction`)."""
    cols = ("order_id", "path", "size", "sha256", "run_id")
    values = tuple(entry[c] for c in cols)
    if isinstance(conn, sqlite3.Connection):
        conn.execute(f"INSERT INTO acquire_library ({', '.join(cols)}) VALUES (?,?,?,?,?)",
                     values)  # fmt: skip
    else:
        await conn.execute(
            f"INSERT INTO acquire.library ({', '.join(cols)}) VALUES (%s,%s,%s,%s,%s)",
            values,
        )
    return entry


def entries(url: str) -> list[dict[str, Any]]:
    """Every library row (for `acquire status` and tests)."""
    query = "SELECT order_id, path, size, sha256, run_id FROM {} ORDER BY order_id"
    if url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(url), timeout=30) as lite:
            lite.row_factory = sqlite3.Row
            return [dict(r) for r in lite.execute(query.format("acquire_library"))]
    with psycopg.connect(url, row_factory=dict_row) as pg:
        return list(pg.execute(query.format("acquire.library")))
