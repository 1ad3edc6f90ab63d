"""Exactly-once database effects (§4.4), transactional start (§4.8), migrations (§4.1)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import psycopg
import pytest

from durably import Durably, LeaseLostError, RetryPolicy, RunFailedError
from tests.helpers import eventually, scaled


def _business_table(url: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS biz_library (k TEXT PRIMARY KEY)")
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA IF NOT EXISTS biz")
            conn.execute("CREATE TABLE IF NOT EXISTS biz.library (k text PRIMARY KEY)")


def _library(url: str) -> list[str]:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return [r[0] for r in conn.execute("SELECT k FROM biz_library ORDER BY k")]
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT k FROM biz.library ORDER BY k")]


async def _insert(conn: Any, key: str) -> str:
    if isinstance(conn, sqlite3.Connection):
        conn.execute("INSERT INTO biz_library VALUES (?)", (key,))
    else:
        await conn.execute("INSERT INTO biz.library VALUES (%s)", (key,))
    return key


async def test_transaction_step_commits_business_write_with_its_record(db_url: str) -> None:
    _business_table(db_url)
    app = Durably(db_url)

    @app.workflow(name="register", version="v1")
    async def wf(ctx: Any, key: str) -> str:
        out = await ctx.step.transaction("register", _insert, key)
        await ctx.step.sleep("replay", "10ms")
        return str(out)

    async with app, app.worker():
        assert await (await wf.start("k1")).result(timeout=scaled(10)) == "k1"
    assert _library(db_url) == ["k1"]


async def test_transaction_step_after_lost_lease_commits_nothing(db_url: str) -> None:
    _business_table(db_url)
    app = Durably(db_url)
    expired = threading.Event()

    async def gate() -> None:
        # Hold the run until its lease is gone, however long the test takes to get there.
        await asyncio.to_thread(expired.wait, scaled(30))

    @app.workflow(name="stolen", version="v1")
    async def wf(ctx: Any) -> None:
        await ctx.step.run("gate", gate)
        await ctx.step.transaction("register", _insert, "k2",
                                   retry=RetryPolicy(max_attempts=1))  # fmt: skip

    async with app:
        handle = await wf.start()
        worker = app.worker()
        async with worker:
            try:
                await eventually(lambda: worker.running.get(handle.run_id), what="the claim")
                execution, _ = worker.running[handle.run_id]
                # Expire the lease behind the worker's back, as if it had been frozen.
                await asyncio.to_thread(_expire_lease, app, handle.run_id)
                with pytest.raises(LeaseLostError):
                    async with app.store.db.transaction() as tx:
                        await app.store.check_lease(tx, execution.lease)
            finally:
                expired.set()
            await eventually(lambda: handle.run_id not in worker.running,
                             what="the worker to give up the run")  # fmt: skip
        run = await app.get_run(handle.run_id)
    assert _library(db_url) == []
    assert run.status != "completed"


def _expire_lease(app: Durably, run_id: str) -> None:
    """From a thread of its own: the app's SQLite connector may be in the middle of a
    transaction that needs the event loop to end (and release the file's lock)."""
    url = app.url
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=scaled(30)) as conn:
            conn.execute("UPDATE durably_runs SET fence = fence + 1 WHERE id = ?", (run_id,))
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE durably.runs SET fence = fence + 1 WHERE id = %s", (run_id,))


async def test_start_inside_the_callers_transaction(db_url: str) -> None:
    _business_table(db_url)
    app = Durably(db_url)

    @app.workflow(name="outboxless", version="v1")
    async def wf(ctx: Any, key: str) -> str:
        return key

    async with app:
        if db_url.startswith("sqlite"):
            conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
            conn.execute("BEGIN")
            conn.execute("INSERT INTO biz_library VALUES ('rolled-back')")
            await wf.start("rolled-back", connection=conn)
            conn.execute("ROLLBACK")
            conn.execute("BEGIN")
            conn.execute("INSERT INTO biz_library VALUES ('kept')")
            kept = await wf.start("kept", connection=conn)
            conn.execute("COMMIT")
            conn.close()
        else:
            async with await psycopg.AsyncConnection.connect(db_url) as aconn:
                async with aconn.transaction(force_rollback=True):
                    await aconn.execute("INSERT INTO biz.library VALUES ('rolled-back')")
                    await wf.start("rolled-back", connection=aconn)
                async with aconn.transaction():
                    await aconn.execute("INSERT INTO biz.library VALUES ('kept')")
                    kept = await wf.start("kept", connection=aconn)
        runs = await app.list_runs()
        assert [r.input for r in runs] == ["kept"]
        async with app.worker():
            assert await kept.result(timeout=scaled(10)) == "kept"
    assert _library(db_url) == ["kept"]


async def test_migrations_are_idempotent_and_complete(db_url: str) -> None:
    app = Durably(db_url, migrate=False)
    first = await app.migrate()
    assert first == [
        "0001_init.sql",
        "0002_workers.sql",
        "0003_workflow_attempt.sql",
        "0004_log_order.sql",
        "0005_claim_by_version.sql",
        "0006_queues.sql",
        "0007_operations.sql",
        "0008_queue_declarations.sql",
        "0009_resumes.sql",
        "0010_given_back.sql",
        "0011_claim_by_namespace.sql",
        "0012_claimed_history.sql",
        "0013_awaited.sql",
        "0014_send_signal.sql",
        "0015_exact_values.sql",
        "0017_given_back_expiry.sql",
    ]
    assert await app.migrate() == []
    await asyncio.gather(*(Durably(db_url).migrate() for _ in range(3)))
    await app.close()


async def test_migrate_false_does_not_touch_the_schema(db_url: str) -> None:
    app = Durably(db_url, migrate=False)

    @app.workflow(name="w", version="v1")
    async def wf(ctx: Any) -> None:
        return None

    with pytest.raises(Exception, match=r"(?i)(does not exist|no such table)"):
        await wf.start()
    await app.close()


async def test_failed_run_keeps_the_error(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(
        name="raises", version="v1", retry=RetryPolicy(max_attempts=2, initial_interval="10ms")
    )
    async def wf(ctx: Any) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    async with app, app.worker():
        handle = await wf.start()
        with pytest.raises(RunFailedError, match="attempt 2"):
            await handle.result(timeout=scaled(10))
        assert (await handle.get()).attempts == 2


async def test_a_workflow_retry_runs_a_failed_step_again(db_url: str) -> None:
    app = Durably(db_url)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(f"call {len(calls)}")
        return "ok"

    policy = RetryPolicy(max_attempts=3, initial_interval="10ms")

    @app.workflow(name="retried", version="v1", retry=policy)
    async def wf(ctx: Any) -> str:
        done = await ctx.step.run("before", lambda: "once")
        out = await ctx.step.run("flaky", flaky, retry=RetryPolicy(max_attempts=1))
        return f"{done} {out}"

    async with app, app.worker():
        handle = await wf.start()
        assert await handle.result(timeout=scaled(10)) == "once ok"
        assert (await handle.get()).attempts == 3
        steps = [(s.step, s.status) for s in await app.list_steps(handle.run_id)]
    assert len(calls) == 3
    assert steps == [("before", "completed"), ("flaky", "failed"), ("flaky", "failed"),
                     ("flaky", "completed")]  # fmt: skip


async def _plan_cache_mode(conn: Any) -> str:
    row = await (await conn.execute("SHOW plan_cache_mode")).fetchone()
    return str(row[0])


async def test_a_transaction_body_plans_as_the_server_is_set_to(pg_url: str) -> None:
    """The engine plans its own statements once (generic plans on its connections); a
    `step.transaction` body's statements are planned as the database says, whatever it says."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f'ALTER DATABASE "{name}" SET plan_cache_mode = force_custom_plan')
    app = Durably(pg_url)

    @app.workflow(name="plans")
    async def plans(ctx: Any) -> list[str]:
        first = await ctx.step.transaction("first", _plan_cache_mode)
        again = await ctx.step.transaction("again", _plan_cache_mode)
        return [first, again]

    async with app, app.worker():
        assert await (await plans.start()).result(timeout=scaled(10)) == ["force_custom_plan"] * 2


async def test_a_migration_behind_a_long_transaction_holds_up_no_statement(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deploy migrates while a long transaction reads a table: the migration's lock
    request must not queue every other statement on that table behind it (the workers'
    heartbeats included) until that transaction ends."""
    from durably.backends import _queries

    async with Durably(pg_url):
        pass  # the schema as shipped
    shipped = _queries.migrations
    next_release = (999, "0999_next.sql", "ALTER TABLE {schema}.runs ADD COLUMN next_one int")
    monkeypatch.setattr(_queries, "migrations", lambda package: [*shipped(package), next_release])
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as holder:
        await holder.execute("BEGIN")
        await holder.execute("SELECT count(*) FROM durably.runs")  # holds its lock till COMMIT
        migrating = asyncio.create_task(Durably(pg_url).connector.migrate())

        async def waits_for_a_lock() -> bool:
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as look:
                cur = await look.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                )
                row = await cur.fetchone()
            return row is not None and row[0] > 0

        await eventually(waits_for_a_lock, what="the migration to wait for its lock")
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
            # Served while the long transaction still holds its lock.
            await asyncio.wait_for(other.execute("SELECT count(*) FROM durably.runs"),
                                   scaled(10))  # fmt: skip
        assert not migrating.done()
        await holder.execute("COMMIT")
    assert await asyncio.wait_for(migrating, scaled(10)) == ["0999_next.sql"]


@pytest.mark.parametrize("ends", ["commit", "rollback"])
async def test_a_body_cannot_end_its_own_transaction(pg_url: str, ends: str) -> None:
    """The business write commits with the step's record or not at all: a body that
    commits (or rolls back, and writes on outside the step's transaction) is refused."""
    _business_table(pg_url)
    app = Durably(pg_url)

    async def body(conn: Any) -> None:
        if ends == "rollback":
            await conn.rollback()
        await conn.execute("INSERT INTO biz.library VALUES ('k1')")
        if ends == "commit":
            await conn.commit()
        raise RuntimeError("the body fails after its write")

    @app.workflow(name="wf")
    async def wf(ctx: Any) -> None:
        await ctx.step.transaction("register", body, retry=RetryPolicy(max_attempts=1))

    async with app, app.worker():
        with pytest.raises(RunFailedError):
            await (await wf.start()).result(timeout=scaled(10))
    assert _library(pg_url) == []
