"""Migrations outside a transaction (`-- durably: no transaction`): 0011 builds the claim
indexes of a table in use without holding up its writes, a build stopped half-way is
repaired by migrating again, and concurrent migrators wait for each other's builds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from durably import DatabaseUnavailable, Durably
from durably.backends import _queries
from tests.helpers import eventually, scaled

_SHIPPED = _queries.migrations
NEW = ("runs_due_in_namespace", "runs_queued_in_namespace")
OLD = ("runs_due", "runs_queued")
# Locks on runs a write (RowExclusiveLock) would wait for.
_BLOCKING_WRITES = "('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')"


def _ship_up_to(monkeypatch: pytest.MonkeyPatch, last: int) -> None:
    """Make the migrations the package ships those up to `last`."""
    monkeypatch.setattr(
        _queries, "migrations", lambda package: [m for m in _SHIPPED(package) if m[0] <= last]
    )


async def _one(conn: psycopg.AsyncConnection[Any], query: str, *params: Any) -> Any:
    row = await (await conn.execute(query, params)).fetchone()
    return None if row is None else row[0]


async def _indexes(conn: psycopg.AsyncConnection[Any]) -> dict[str, bool]:
    """The claim indexes of runs there are, each with whether it is valid."""
    cur = await conn.execute(
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'durably.runs'::regclass AND c.relname = ANY(%s)",
        ([*NEW, *OLD],),
    )
    return dict(await cur.fetchall())


async def _at_0010_with_runs(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _ship_up_to(monkeypatch, 10)
    await Durably(url).connector.migrate()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO durably.runs (id, namespace, workflow, version, status, available_at)"
            " SELECT 'r' || n, 'default', 'w', 'v1', 'pending', now()"
            " FROM generate_series(1, 1000) n"
        )
    _ship_up_to(monkeypatch, 11)


async def _migrator_waiting(url: str) -> Any:
    """The pid of the migration's connection once it waits for a lock (in the test: for
    the writer's transaction to end)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as look:
        return await _one(
            look,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query ILIKE '%%index%%'",
        )


@contextlib.asynccontextmanager
async def _build_behind_a_writer(
    url: str,
) -> AsyncIterator[tuple[psycopg.AsyncConnection[Any], asyncio.Task[list[str]], Any]]:
    """A transaction that wrote to runs, left open, and the migration to 0011 started beside
    it: (the writer, the migration, its server pid), once the build waits for the writer."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as writer:
        await writer.execute("BEGIN")
        await writer.execute("UPDATE durably.runs SET updated_at = now() WHERE id = 'r1'")
        migrating = asyncio.create_task(Durably(url).connector.migrate())
        pid = await eventually(lambda: _migrator_waiting(url), what="the build to wait")
        yield writer, migrating, pid


async def test_building_the_claim_indexes_holds_up_no_write(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling deploy migrates while the previous release's workers write to runs: the
    build waits for the transactions that write, and meanwhile holds no lock on runs that
    a write would wait for; the claims keep the old indexes until the new ones are valid."""
    await _at_0010_with_runs(pg_url, monkeypatch)
    async with _build_behind_a_writer(pg_url) as (writer, migrating, pid):
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
            blocking = await other.execute(
                "SELECT mode, granted FROM pg_locks WHERE pid = %s"
                f" AND relation = 'durably.runs'::regclass AND mode IN {_BLOCKING_WRITES}",
                (pid,),
            )
            assert await blocking.fetchall() == []
            assert await _indexes(other) == {"runs_due": True, "runs_queued": True,
                                             "runs_due_in_namespace": False}  # fmt: skip
            for n in range(2, 12):  # each write commits at once, beside the build
                await asyncio.wait_for(
                    other.execute("UPDATE durably.runs SET attempts = 1 WHERE id = %s", (f"r{n}",)),
                    scaled(5),
                )
            await asyncio.wait_for(
                other.execute(
                    "INSERT INTO durably.runs (id, namespace, workflow, version, status)"
                    " VALUES ('new', 'default', 'w', 'v1', 'pending')"
                ),
                scaled(5),
            )
        assert not migrating.done()
        await writer.execute("COMMIT")
    assert await asyncio.wait_for(migrating, scaled(30)) == ["0011_claim_by_namespace.sql"]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await _indexes(conn) == dict.fromkeys(NEW, True)


async def test_a_build_stopped_half_way_is_repaired_by_migrating_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migrator is killed during the build: the invalid index it leaves behind is
    dropped and built again by the next migration, which only then records 0011."""
    await _at_0010_with_runs(pg_url, monkeypatch)
    async with _build_behind_a_writer(pg_url) as (writer, migrating, pid):
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as killer:
            await killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(DatabaseUnavailable):
            await asyncio.wait_for(migrating, scaled(10))
        await writer.execute("COMMIT")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await _indexes(conn) == {"runs_due": True, "runs_queued": True,
                                        "runs_due_in_namespace": False}  # fmt: skip
        assert await _one(conn, "SELECT count(*) FROM durably.migrations") == 10
    assert await Durably(pg_url).connector.migrate() == ["0011_claim_by_namespace.sql"]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await _indexes(conn) == dict.fromkeys(NEW, True)
        assert await _one(conn, "SELECT max(version) FROM durably.migrations") == 11


async def test_an_index_marked_invalid_is_built_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever left it invalid, an index of the name a migration builds is not kept."""
    await _at_0010_with_runs(pg_url, monkeypatch)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute("CREATE INDEX runs_queued_in_namespace ON durably.runs (namespace)")
        await conn.execute(
            "UPDATE pg_index SET indisvalid = false"
            " WHERE indexrelid = 'durably.runs_queued_in_namespace'::regclass"
        )
    assert await Durably(pg_url).connector.migrate() == ["0011_claim_by_namespace.sql"]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await _indexes(conn) == dict.fromkeys(NEW, True)
        definition = await _one(
            conn, "SELECT pg_get_indexdef('durably.runs_queued_in_namespace'::regclass)"
        )
    assert "(namespace, workflow, version, queue, priority DESC, available_at)" in definition


async def test_concurrent_migrators_of_a_new_database_wait_for_each_other(pg_url: str) -> None:
    """Three processes start at once on a new database: one applies every migration, the
    concurrent builds of 0011 included, while the others wait without holding a snapshot
    that the builds would wait for (a deadlock)."""
    results = await asyncio.gather(*(Durably(pg_url).connector.migrate() for _ in range(3)))
    names = [m[1] for m in _queries.migrations("durably.backends.postgres")]
    assert sorted(results, key=len) == [[], [], names]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await _indexes(conn) == dict.fromkeys(NEW, True)


async def test_an_older_releases_migrator_is_not_held_up_by_the_build(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous release's migrator (as a worker of it starts during the deploy) takes
    the schema's lock in its transaction and waits there, with a snapshot; the build waits
    for every older snapshot. Held through the build, the lock made the two deadlock: the
    old worker failed to start, or the build was thrown away (review). The old migrator
    now gets it at once, finds nothing it knows to apply, and ends."""
    await _at_0010_with_runs(pg_url, monkeypatch)
    async with _build_behind_a_writer(pg_url) as (writer, migrating, _):
        async with (  # what migrate() of the previous release does
            await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as old,
            asyncio.timeout(scaled(10)),
            old.transaction(),
        ):
            await old.execute("SELECT pg_advisory_xact_lock(hashtext('durably:durably'))")
            assert await _one(old, "SELECT max(version) FROM durably.migrations") == 10
        await writer.execute("COMMIT")
    assert await migrating == ["0011_claim_by_namespace.sql"]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await _indexes(conn) == dict.fromkeys(NEW, True)


async def test_opening_an_app_on_a_current_schema_takes_no_lock(pg_url: str) -> None:
    """Every `durably`/`acquire` command opens an app: on a schema with every migration
    applied, that is one read, not the migration lock, DDL and a commit. It went on trying
    for the lock while another migrator held it (a hook of qBittorrent's, say, while a
    deploy migrates), although it had nothing to apply."""
    assert await Durably(pg_url).connector.migrate() != []
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(hashtext('durably-migrate:durably'))")
        assert await asyncio.wait_for(Durably(pg_url).connector.migrate(), scaled(5)) == []
