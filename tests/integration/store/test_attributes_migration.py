"""Migration 0027 (search attributes, SPEC §4.24) on a PostgreSQL database in use: the
column and the SQL API's functions change in the migration's transaction; the GIN index is
built CONCURRENTLY after it commits (`-- durably: then outside a transaction`), holding up
no write while it waits for older transactions; a migration stopped between the two parts
is run again from the top; `list_runs(attributes=...)` is read from that index."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg import sql

from durably import Durably
from durably.backends import _queries
from tests.helpers import eventually, scaled

_SHIPPED = _queries.migrations
_PG = "durably.backends.postgres"
_BLOCKING_WRITES = "('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')"


def _ship_up_to(monkeypatch: pytest.MonkeyPatch, last: int) -> None:
    monkeypatch.setattr(
        _queries, "migrations", lambda package: [m for m in _SHIPPED(package) if m[0] <= last]
    )


async def _one(conn: psycopg.AsyncConnection[Any], query: str, *params: Any) -> Any:
    row = await (await conn.execute(query, params)).fetchone()
    return None if row is None else row[0]


async def _at_0026_with_runs(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _ship_up_to(monkeypatch, 26)
    await Durably(url).connector.migrate()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO durably.runs (id, namespace, workflow, version, status, available_at)"
            " SELECT 'r' || n, 'default', 'w', 'v1', 'pending', now()"
            " FROM generate_series(1, 1000) n"
        )
    _ship_up_to(monkeypatch, 27)


async def _index_valid(conn: psycopg.AsyncConnection[Any]) -> bool | None:
    return await _one(  # type: ignore[no-any-return]
        conn,
        "SELECT i.indisvalid FROM pg_index i"
        " WHERE i.indexrelid = to_regclass('durably.runs_attributes')",
    )


async def _build_waiting(url: str) -> Any:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as look:
        return await _one(
            look,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query ILIKE '%%runs_attributes%%'",
        )


async def test_the_index_is_built_beside_writes_once_the_column_committed(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _at_0026_with_runs(pg_url, monkeypatch)
    async with (
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as older,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other,
    ):
        # A transaction with a snapshot older than the build (it touched no run: the
        # column's moment of lock does not wait for it): the build waits for it to end.
        await older.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await older.execute("SELECT count(*) FROM durably.workers")
        migrating = asyncio.create_task(Durably(pg_url).connector.migrate())
        pid = await eventually(lambda: _build_waiting(pg_url), what="the build to wait")
        blocking = await other.execute(
            "SELECT mode FROM pg_locks WHERE pid = %s"
            f" AND relation = 'durably.runs'::regclass AND mode IN {_BLOCKING_WRITES}",
            (pid,),
        )
        assert await blocking.fetchall() == []
        assert await _index_valid(other) is False  # being built
        # A start of this release (its insert_run) and a worker's write, beside the build.
        await asyncio.wait_for(other.execute(
            "INSERT INTO durably.runs (id, namespace, workflow, version, status, attributes)"
            " VALUES ('new', 'default', 'w', 'v1', 'pending', '{\"customer\": \"c-1\"}')"
        ), scaled(5))  # fmt: skip
        await asyncio.wait_for(
            other.execute("UPDATE durably.runs SET attempts = 1 WHERE id = 'r2'"), scaled(5)
        )
        assert not migrating.done()
        await older.execute("COMMIT")
        assert await asyncio.wait_for(migrating, scaled(30)) == ["0027_attributes.sql"]
        assert await _index_valid(other) is True
    async with Durably(pg_url) as app:
        found = await app.list_runs(attributes={"customer": "c-1"})
    assert [r.run_id for r in found] == ["new"]


async def test_a_migration_stopped_between_its_parts_is_run_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction's part committed, the build never ran (the migrator was killed):
    0027 is not recorded, and the next migration runs it all again, then records it."""
    await _at_0026_with_runs(pg_url, monkeypatch)
    [(_, _, text)] = [m for m in _SHIPPED(_PG) if m[0] == 27]
    head, tail = _queries.then_outside(text)
    assert tail is not None and "CONCURRENTLY" in tail
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        async with conn.transaction():
            schema = sql.Identifier("durably")
            await conn.execute(sql.SQL(head).format(schema=schema))
        assert await _index_valid(conn) is None
        assert await _one(conn, "SELECT max(version) FROM durably.migrations") < 27
    assert await Durably(pg_url).connector.migrate() == ["0027_attributes.sql"]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await _index_valid(conn) is True
        assert await _one(conn, "SELECT max(version) FROM durably.migrations") == 27
        definition = await _one(conn, "SELECT pg_get_indexdef('durably.runs_attributes'::regclass)")
        overloads = await _one(
            conn, "SELECT count(*) FROM pg_proc WHERE proname = 'start_run'"
            " AND pronamespace = 'durably'::regnamespace",
        )  # fmt: skip
    assert "gin (attributes jsonb_path_ops) WHERE (attributes IS NOT NULL)" in definition
    assert overloads == 1  # the old signature dropped: no call is ambiguous


async def test_listing_by_attributes_reads_the_gin_index(pg_url: str) -> None:
    """Planned with its value (`-- plan: each call`), the filter is read from
    runs_attributes, not by walking every run newest first."""
    app = Durably(pg_url)
    async with app:
        await app.start("w", 1, version="v1", attributes={"customer": "c-1"})
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO durably.runs (id, namespace, workflow, version, status, attributes)"
            " SELECT 'r' || n, 'default', 'w', 'v1', 'completed',"
            " jsonb_build_object('customer', 'c-' || (n % 5000))"
            " FROM generate_series(1, 20000) n"
        )
        await conn.execute("ANALYZE durably.runs")
        plan = await (
            await conn.execute(
                'EXPLAIN SELECT * FROM durably.runs WHERE attributes @> \'{"customer": "c-7"}\''
                " ORDER BY created_at DESC, id LIMIT 100"
            )
        ).fetchall()
    assert "runs_attributes" in " ".join(r[0] for r in plan), plan
