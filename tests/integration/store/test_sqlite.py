"""SQLite specifics (issue 11): durable commits, read-only opening, and wake-ups between
processes that share one file."""

from __future__ import annotations

import asyncio
import linecache
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from durably import DatabaseUnavailable, Durably
from durably.backends.sqlite.connector import SqliteConnector
from durably.core.errors import ConfigurationError
from tests.helpers import eventually, scaled


def _register(app: Durably, hold: Any) -> None:
    @app.workflow(name="long", version="v1")
    async def long(ctx: Any) -> None:
        await ctx.step.run("hold", hold)

    @app.workflow(name="quick", version="v1")
    async def quick(ctx: Any) -> str:
        return "quick"


async def test_a_busy_worker_notices_work_another_process_commits(sqlite_url: str) -> None:
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        holding.set()
        await release.wait()

    worker_side = Durably(sqlite_url)
    other = Durably(sqlite_url)  # its own connection: its commits reach the worker via the file
    _register(worker_side, hold)
    _register(other, hold)
    async with worker_side, other, worker_side.worker(concurrency=4, poll_interval="1h"):
        await worker_side.start("long")
        await eventually(holding.is_set, what="the long step to start")
        handle = await other.start("quick")
        # Busy with a free slot: the commit is noticed, not the next poll (an hour away).
        assert await handle.result(timeout=scaled(10)) == "quick"
        release.set()


async def test_engine_commits_are_durable(sqlite_url: str) -> None:
    async with Durably(sqlite_url) as app:
        conn = cast(SqliteConnector, app.connector)._conn
        assert conn is not None
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_read_only_creates_nothing_and_writes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "dir" / "x.db"
    with pytest.raises(DatabaseUnavailable, match="for reading"):
        await Durably(f"sqlite:///{missing}?mode=ro").list_runs()
    assert not (tmp_path / "no").exists()

    sqlite3.connect(tmp_path / "other.db").close()  # a file, but not durably's
    with pytest.raises(ConfigurationError, match="no durably tables"):
        await Durably(f"sqlite:///{tmp_path}/other.db?mode=ro").list_runs()

    app = Durably(f"sqlite:///{tmp_path}/x.db")
    _register(app, lambda: None)
    async with app:
        run_id = (await app.start("quick")).run_id
    reader = Durably(f"sqlite:///{tmp_path}/x.db?mode=ro")
    _register(reader, lambda: None)
    async with reader:
        assert [r.run_id for r in await reader.list_runs()] == [run_id]
        assert (await reader.get_run(run_id)).status == "pending"
        with pytest.raises(DatabaseUnavailable, match="readonly"):
            await reader.start("quick")
    with pytest.raises(ConfigurationError, match="the one option is"):
        Durably(f"sqlite:///{tmp_path}/x.db?mode=rw")


async def test_a_transaction_cancelled_while_it_waits_to_begin_leaves_none_open(
    sqlite_url: str,
) -> None:
    """BEGIN IMMEDIATE waits for the file's write lock in the connector's thread; a task
    cancelled meanwhile (a worker stopping, a timeout) stops waiting, but the BEGIN still
    runs there. Its transaction used to stay open: every later transaction of the app then
    failed ("cannot start a transaction within a transaction")."""
    app = Durably(sqlite_url)
    app.workflow(name="quick", version="v1")(_quick)
    async with app:
        await app.start("quick")  # the file exists, migrated
        holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        waiting = asyncio.create_task(app.start("quick"))
        await eventually(_waiting_to_begin, what="the start to wait for the lock")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        holder.execute("ROLLBACK")
        holder.close()
        handle = await app.start("quick")
        assert (await app.get_run(handle.run_id)).status == "pending"


async def _quick(ctx: Any) -> str:
    return "quick"


def _waiting_to_begin() -> bool:
    """A thread of the SQLite connector is in its BEGIN (waiting for the write lock)."""
    for frame in sys._current_frames().values():
        source = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        if frame.f_code.co_filename.endswith("connector.py") and "BEGIN IMMEDIATE" in source:
            return True
    return False


@pytest.mark.parametrize("body", ["sync", "async", "fails once"])
async def test_a_transaction_body_longer_than_the_lease_costs_no_run_its_lease(
    sqlite_url: str, body: str
) -> None:
    """A `step.transaction` body holds the engine's one connection, and SQLite's write
    lock, for as long as it runs: twice the lease here. The worker's leases are renewed
    meanwhile (bodies.py), so neither its other run nor the body's own is halted: each
    step runs once, and a body that fails has its write rolled back (the renewals stay).
    A plain function body runs on the connection's thread, not on the event loop. (Before,
    every run of the worker was halted as its lease ran out, the slow one again and again.)"""
    app = Durably(sqlite_url)
    release = threading.Event()
    tries: list[int] = []
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("CREATE TABLE biz_rows (k TEXT)")

    async def waits() -> str:
        await asyncio.to_thread(release.wait, scaled(30))
        return "waited"

    def slow_sync(conn: sqlite3.Connection) -> str:
        tries.append(len(tries))
        conn.execute("INSERT INTO biz_rows VALUES (?)", (f"try{len(tries)}",))
        if body == "fails once" and len(tries) == 1:
            time.sleep(scaled(2))
            raise RuntimeError("the first attempt fails after its write")
        if body != "fails once":
            time.sleep(scaled(2))  # twice the lease
        return "slow"

    async def slow_async(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO biz_rows VALUES ('try1')")
        await asyncio.sleep(scaled(2))
        return "slow"

    @app.workflow(name="other", version="v1")
    async def other(ctx: Any) -> str:
        return str(await ctx.step.run("wait", waits))

    @app.workflow(name="slow", version="v1")
    async def slow_tx(ctx: Any) -> str:
        fn = slow_async if body == "async" else slow_sync
        return str(await ctx.step.transaction("slow", fn))

    async with app, app.worker(lease=f"{scaled(1):g}s", heartbeat=f"{scaled(0.2):g}s"):
        waiting = await other.start()

        async def wait_runs() -> bool:
            steps = await app.list_steps(waiting.run_id)
            return any(s.step == "wait" and s.status == "running" for s in steps)

        await eventually(wait_runs, what="the other run's step to run")
        try:
            slow = await slow_tx.start()
            assert await slow.result(timeout=scaled(20)) == "slow"
        finally:
            release.set()
        assert await waiting.result(timeout=scaled(20)) == "waited"
        other_steps = await app.list_steps(waiting.run_id)
        slow_steps = await app.list_steps(slow.run_id)
    assert [s.status for s in other_steps if s.step == "wait"] == ["completed"]
    expected = ["failed", "completed"] if body == "fails once" else ["completed"]
    assert [s.status for s in slow_steps] == expected
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        rows = [r[0] for r in conn.execute("SELECT k FROM biz_rows")]
    assert rows == (["try2"] if body == "fails once" else ["try1"])
    fences = await _fences(sqlite_url)  # claimed once (a retry's back-off parks the run)
    assert fences == {waiting.run_id: 1, slow.run_id: 2 if body == "fails once" else 1}


async def _fences(url: str) -> dict[str, int]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return {r[0]: r[1] for r in conn.execute("SELECT id, fence FROM durably_runs")}


async def test_a_body_that_ends_its_transaction_past_the_refusals_fails_its_attempt(
    sqlite_url: str,
) -> None:
    """A body that takes the engine's authorizer away and commits: its write is committed
    (nothing can undo it now), but its attempt fails by its policy, not with the step's
    record in autocommit nor its run held until its lease runs out."""
    app = Durably(sqlite_url)
    tries: list[int] = []

    def body(conn: sqlite3.Connection) -> int:
        tries.append(1)
        conn.execute("CREATE TABLE IF NOT EXISTS biz_library (k TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO biz_library VALUES (?)", (f"k{len(tries)}",))
        if len(tries) == 1:
            conn.set_authorizer(None)
            conn.execute("COMMIT")
        return len(tries)

    @app.workflow(name="wf")
    async def wf(ctx: Any) -> int:
        result: int = await ctx.step.transaction("register", body)
        return result

    async with app, app.worker(lease="60s"):
        handle = await wf.start()
        assert await handle.result(timeout=scaled(10)) == 2
        steps = await app.list_steps(handle.run_id)
    assert [(s.attempt, s.status) for s in steps] == [(1, "failed"), (2, "completed")]
    assert "cannot end the step's transaction" in str(steps[0].error)
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        assert [r[0] for r in conn.execute("SELECT k FROM biz_library ORDER BY k")] == [
            "k1", "k2"]  # fmt: skip
