"""The database misbehaving (issue 11): a lost COMMIT reply, bytes PostgreSQL cannot store,
lock contention between heartbeats and group commits, errors of every kind classified."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest

from durably import (
    DatabaseUnavailable,
    Durably,
    RetryPolicy,
    RunFailedError,
    RunHandle,
    WorkflowTimeoutError,
)
from durably.backends.postgres import connector as pg
from durably.backends.postgres import transactions
from durably.backends.postgres.transactions import PgTx
from durably.backends.sqlite import connector as lite
from tests.faults import FaultProxy
from tests.helpers import duration, scaled


def _business_table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA biz")
        conn.execute("CREATE TABLE biz.library (k text)")  # no key: a second insert would show


def _library(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT k FROM biz.library ORDER BY k")]


async def test_a_lost_commit_reply_commits_the_transaction_step_once(
    pg_url: str, fault_proxy: FaultProxy
) -> None:
    _business_table(pg_url)
    app = Durably(fault_proxy.url_for(pg_url))
    calls: list[str] = []

    async def register(conn: Any, key: str) -> str:
        calls.append(key)
        await conn.execute("INSERT INTO biz.library VALUES (%s)", (key,))
        return key

    @app.workflow(name="register", version="v1")
    async def wf(ctx: Any, key: str) -> str:
        return str(await ctx.step.transaction("register", register, key))

    async with app:
        handle = await wf.start("k1")
        fault_proxy.cut_after_commit()  # the first COMMIT from now on: the step's
        async with app.worker(lease="2s", heartbeat="0.5s"):
            assert await handle.result(timeout=scaled(30)) == "k1"
        steps = await app.list_steps(handle.run_id)
    assert fault_proxy.commits_cut == 1
    assert calls == ["k1"]
    assert _library(pg_url) == ["k1"]
    assert [(s.step, s.attempt, s.status) for s in steps] == [("register", 1, "completed")]


async def test_a_nul_in_a_step_result_fails_only_its_own_run(pg_url: str) -> None:
    app = Durably(pg_url)
    entered: list[int] = []
    together = asyncio.Event()

    async def body(i: int) -> str:
        entered.append(i)
        if len(entered) == 20:
            together.set()
        await together.wait()  # the first 20 end in one turn of the loop: one group commit
        if i == 3:
            raise ValueError("a\x00b in an error message")
        return "a\x00b" if i == 7 else f"r{i}"

    @app.workflow(name="nul", version="v1")
    async def wf(ctx: Any, i: int) -> str:
        name = "bo\x00dy" if i == 5 else "body"  # a record the database refuses
        return str(await ctx.step.run(name, body, i, retry=RetryPolicy(max_attempts=1)))

    async with app, app.worker(concurrency=20):
        handles = [await wf.start(i) for i in range(40)]
        outcomes = await asyncio.gather(*(h.result(timeout=scaled(30)) for h in handles),
                                        return_exceptions=True)  # fmt: skip
    for i, outcome in enumerate(outcomes):
        if i == 7:
            assert isinstance(outcome, RunFailedError)
            assert "character (U+0000)" in str(outcome), outcome
            assert "the result of step 'body'" in str(outcome)
        elif i == 3:
            assert isinstance(outcome, RunFailedError)
            assert "ValueError: a\\x00b in an error message" in str(outcome), outcome
        elif i == 5:
            assert isinstance(outcome, RunFailedError)
            assert "\\u0000 cannot be converted to text" in str(outcome), outcome
        else:
            assert outcome == f"r{i}"


async def test_heartbeats_and_group_commits_never_repeat_a_step(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durably")
    app = Durably(db_url, pool_size=20)
    ran: Counter[tuple[int, int]] = Counter()

    async def body(i: int, step: int) -> int:
        ran[(i, step)] += 1
        await asyncio.sleep(0)
        return i

    @app.workflow(name="busy", version="v1")
    async def wf(ctx: Any, i: int) -> int:
        for step in range(3):
            await ctx.step.run(f"s{step}", body, i, step)
        return i

    async with app:
        handles = [await wf.start(i) for i in range(400)]
        began = time.monotonic()
        async with app.worker(concurrency=50, lease=duration(1), heartbeat="50ms"):
            results = await asyncio.gather(*(h.result(timeout=scaled(120)) for h in handles))
        took = time.monotonic() - began
    messages = [r.getMessage() for r in caplog.records]
    print(f"\n{db_url.split(':')[0]}: 400 runs x 3 steps in {took:.2f}s; executions per "
          f"step: {sorted(Counter(ran.values()).items())}; deadlocks retried: "
          f"{sum('deadlock' in m or 'serializ' in m for m in messages)}; runs interrupted: "
          f"{sum('lease expired before' in m for m in messages)} (lease expired locally), "
          f"{sum('lease was lost' in m for m in messages)} (lease lost)")  # fmt: skip
    assert results == list(range(400))
    assert len(ran) == 1200 and set(ran.values()) == {1}


# ------------------------------------------------------------------ errors, classified


@pytest.mark.parametrize(
    ("error", "becomes"),
    [
        (psycopg.OperationalError("server closed the connection unexpectedly"), "unavailable"),
        (psycopg.errors.ConnectionFailure("connection failure"), "unavailable"),
        (psycopg.errors.AdminShutdown("terminating connection"), "unavailable"),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), "unavailable"),
        (psycopg.errors.TooManyConnections("too many clients"), "unavailable"),
        (psycopg_pool.PoolTimeout("couldn't get a connection after 10.00 sec"), "unavailable"),
        (psycopg.errors.DeadlockDetected("deadlock detected"), "deadlock"),
        (psycopg.errors.SerializationFailure("could not serialize access"), "deadlock"),
        (psycopg.errors.UntranslatableCharacter("\\u0000 cannot be converted"), None),
        (psycopg.errors.UniqueViolation("duplicate key"), None),
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), None),
        (psycopg.errors.UndefinedTable("relation does not exist"), None),
    ],
)
def test_postgres_errors_are_classified(error: psycopg.Error, becomes: str | None) -> None:
    seen = pg.classify(error)
    if becomes is None:
        assert seen is error
    else:
        assert isinstance(seen, DatabaseUnavailable)
        assert becomes in str(seen) and ("unavailable" in str(seen)) == (becomes != "deadlock")


async def test_a_deadlocked_statement_is_run_again_then_reported_as_such(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Durably(pg_url)
    real = PgTx._fetch
    failures = [2]

    async def conflicted(self: PgTx, query: str, params: dict[str, Any]) -> Any:
        if query == "get_run" and failures[0] > 0:
            failures[0] -= 1
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return await real(self, query, params)

    async with app:
        monkeypatch.setattr(PgTx, "_fetch", conflicted)
        assert await app.store.db.fetch("get_run", run_id="none") == []  # third time lucky
        failures[0] = 100
        with pytest.raises(DatabaseUnavailable) as raised:
            await app.store.db.fetch("get_run", run_id="none")
    assert failures[0] == 100 - pg.CONFLICT_TRIES
    assert "aborted get_run 4 times in a row as a deadlock" in str(raised.value)
    assert "unavailable" not in str(raised.value)


async def test_a_deadlock_in_a_transaction_is_unavailable_and_rolled_back(pg_url: str) -> None:
    _business_table(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO biz.library VALUES ('a'), ('b')")
    app = Durably(pg_url)
    first_locked = [asyncio.Event(), asyncio.Event()]
    outcomes: list[BaseException | None] = [None, None]

    async def lock_both(me: int) -> None:
        order = ["a", "b"] if me == 0 else ["b", "a"]
        try:
            async with app.store.db.transaction(pipelined=False) as tx:  # as a step body gets it
                conn = tx.connection
                await conn.execute("UPDATE biz.library SET k = k WHERE k = %s", (order[0],))
                first_locked[me].set()
                await first_locked[1 - me].wait()
                await conn.execute("UPDATE biz.library SET k = k || '!' WHERE k = %s",
                                   (order[1],))  # fmt: skip
        except Exception as exc:
            outcomes[me] = exc

    async with app:
        await asyncio.gather(lock_both(0), lock_both(1))
    errors = [e for e in outcomes if e is not None]
    assert len(errors) == 1 and isinstance(errors[0], DatabaseUnavailable), outcomes
    assert "deadlock" in str(errors[0]) and "unavailable" not in str(errors[0])
    assert sorted(_library(pg_url)) in (["a", "b!"], ["a!", "b"])  # one of them committed


def test_sqlite_errors_are_classified(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    holder.execute("INSERT INTO t VALUES ('a')")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    caught: dict[str, sqlite3.Error] = {}
    cases: dict[str, Callable[[], object]] = {
        "busy": lambda: other.execute("BEGIN IMMEDIATE"),
        "read-only": lambda: reader.execute("INSERT INTO t VALUES ('b')"),
        "no such table": lambda: other.execute("SELECT * FROM nope"),
        "constraint": lambda: holder.execute("INSERT INTO t VALUES ('a')"),
    }
    for name, fn in cases.items():
        with pytest.raises(sqlite3.Error) as raised:
            fn()
        caught[name] = raised.value
    for conn in (holder, other, reader):
        conn.close()
    assert isinstance(lite.classify(caught["busy"]), DatabaseUnavailable)
    assert isinstance(lite.classify(caught["read-only"]), DatabaseUnavailable)
    assert lite.classify(caught["no such table"]) is caught["no such table"]
    assert lite.classify(caught["constraint"]) is caught["constraint"]


async def test_a_schema_migrated_under_a_running_worker_fails_nothing(pg_url: str) -> None:
    # Found by review: a deploy migrates (adds a column) while an old worker runs. Its
    # prepared statements that read `*` are refused ("cached plan must not change result
    # type") on every use of their connection: the worker's claim loop died on it, and a
    # run's own reads poisoned the run.
    app = Durably(pg_url)
    seen: list[int] = []

    async def note(k: int) -> int:
        seen.append(k)
        return k

    @app.workflow(name="steady", version="v1")
    async def steady(ctx: Any, k: int) -> int:
        await ctx.step.run("note", note, k)
        await ctx.step.sleep("nap", "10ms")  # parks: the next claim reads the run again
        return k

    async with app, app.worker(concurrency=4):
        assert await (await steady.start(1)).result(timeout=scaled(10)) == 1
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute("ALTER TABLE durably.runs ADD COLUMN added_by_a_deploy int")
            await conn.execute("ALTER TABLE durably.step_attempts ADD COLUMN added int")
        handles = [await steady.start(k) for k in range(2, 6)]
        assert [await h.result(timeout=scaled(10)) for h in handles] == [2, 3, 4, 5]
        assert (await app.get_run(handles[0].run_id)).status == "completed"
    assert sorted(seen) == [1, 2, 3, 4, 5]


async def test_a_conflict_leaves_the_pools_alone(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost connection has the pools replace their idle connections; a deadlock is no
    sign of that (a pool test or drain per conflict came exactly when load was high)."""
    app = Durably(pg_url)
    real = PgTx._fetch
    failures = [1]
    drains: list[object] = []
    real_drain = psycopg_pool.AsyncConnectionPool.drain

    async def conflicted(self: PgTx, query: str, params: dict[str, Any]) -> Any:
        if query == "get_run" and failures[0] > 0:
            failures[0] -= 1
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return await real(self, query, params)

    async def counted(self: Any) -> None:
        drains.append(self)
        await real_drain(self)

    async with app:
        monkeypatch.setattr(PgTx, "_fetch", conflicted)
        monkeypatch.setattr(psycopg_pool.AsyncConnectionPool, "drain", counted)
        assert await app.store.db.fetch("get_run", run_id="none") == []
    assert failures == [0] and drains == []


@contextlib.asynccontextmanager
async def _a_pending_run(url: str) -> AsyncIterator[tuple[Durably, RunHandle[int]]]:
    """An app on `url`, and a run of it that stays pending (no worker) and sets no event."""
    app = Durably(url)

    @app.workflow(name="never-run", version="v1")
    async def never_run(ctx: Any) -> int:
        return 1

    async with app:
        yield app, await never_run.start()


@pytest.mark.parametrize("meets", ["mark", "read"])
async def test_a_result_awaited_over_a_frozen_network_times_out_when_asked(
    pg_url: str, fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch, meets: str
) -> None:
    """`result(timeout=)` bounds the whole call: with the network frozen, the run is still
    unknown when the timeout passes (WorkflowTimeoutError), not when a statement deadline
    does (DatabaseUnavailable; 2 s here, 30 s in production), nor psycopg's cancel of a
    read (10 s). The timeout meets the end watch's mark of the run (`mark`), or a read (the
    mark left out, as for a read after a wake-up)."""
    monkeypatch.setattr(transactions, "STATEMENT_S", scaled(2))
    async with _a_pending_run(fault_proxy.url_for(pg_url)) as (app, handle):
        if meets == "read":
            app.end_watch._marks = False
        fault_proxy.freeze()
        with pytest.raises(WorkflowTimeoutError):
            await asyncio.wait_for(handle.result(timeout=0.2), scaled(3))
        fault_proxy.thaw()


async def test_an_event_awaited_over_a_frozen_network_ends_when_asked(
    pg_url: str, fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`get_event(timeout=)` bounds the whole call, as `result(timeout=)` does: with the
    network frozen, the call ends when the timeout passes, not when a statement deadline
    does (2 s here, 30 s in production) nor psycopg's cancel of the read (10 s more). Its
    answer is not None: nothing was read, so nobody knows whether the run set the event."""
    monkeypatch.setattr(transactions, "STATEMENT_S", scaled(2))
    async with _a_pending_run(fault_proxy.url_for(pg_url)) as (app, handle):
        fault_proxy.freeze()
        with pytest.raises(WorkflowTimeoutError, match=r"could not be read within 0\.2s"):
            await asyncio.wait_for(app.get_event(handle.run_id, "k", timeout=0.2), scaled(3))
        unopened = Durably(fault_proxy.url_for(pg_url))  # its connecting counts too
        with pytest.raises(WorkflowTimeoutError):
            await asyncio.wait_for(unopened.get_event(handle.run_id, "k", timeout=0.2), scaled(3))
        fault_proxy.thaw()
        await unopened.close()
        assert await app.get_event(handle.run_id, "k", timeout=0) is None


async def test_a_result_wait_cancelled_by_its_caller_over_a_frozen_network_ends_at_once(
    pg_url: str, fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`result()` with no timeout of its own, bounded by the caller (`wait_for`, a web
    request cancelled): the caller has control back at once, not after psycopg's cancel
    of the read on the frozen connection (10 s); the read ends in the background."""
    monkeypatch.setattr(transactions, "STATEMENT_S", scaled(20))
    async with _a_pending_run(fault_proxy.url_for(pg_url)) as (app, handle):
        app.end_watch._marks = False  # the wait reads the run, then waits for its end
        with pytest.raises(WorkflowTimeoutError):  # the app's listener is up: next, a read
            await handle.result(timeout=0.05)
        fault_proxy.freeze()
        call = asyncio.ensure_future(asyncio.wait_for(handle.result(), 0.2))
        # Not stretched by DURABLY_TEST_SLOWNESS: what it tells apart is psycopg's 10 s
        # cancel, not the machine's speed.
        done, _ = await asyncio.wait([call], timeout=5.0)
        fault_proxy.thaw()
        assert call in done, "the caller's own bound did not give it control back"
        with pytest.raises(TimeoutError):
            call.result()
