"""Exactly-once database effects (§4.4), transactional start (§4.8), migrations (§4.1)."""

from __future__ import annotations

import asyncio
import inspect
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
                        await app.store.steps.check_lease(tx, execution.lease)
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
        # PostgreSQL only: SQLite's planner never takes its runs_claim for the claim
        *(["0018_due_by_status.sql"] if db_url.startswith("postgres") else []),
        "0019_held.sql",
        "0020_parked_on.sql",
        # PostgreSQL only: SQLite has no stored functions for other languages to call
        *(["0021_sql_api.sql"] if db_url.startswith("postgres") else []),
        "0022_streams.sql",
        "0023_requests.sql",
        "0024_continued.sql",
        "0025_debounce.sql",
        "0026_on_full.sql",
        "0027_attributes.sql",
        # PostgreSQL only: the SQL API's send_signal refuses the reserved prefix
        *(["0028_reserved_signals.sql"] if db_url.startswith("postgres") else []),
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


@pytest.mark.parametrize(
    "text",
    [
        "ALTER TABLE {schema}.runs ADD COLUMN next_one int",
        # A migration outside a transaction (0025's columns, before its concurrent build).
        "-- durably: no transaction\n"
        "ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS next_one int",
    ],
)
async def test_a_migration_behind_a_long_transaction_holds_up_no_statement(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """A deploy migrates while a long transaction reads a table: the migration's lock
    request must not queue every other statement on that table behind it (the workers'
    heartbeats included) until that transaction ends."""
    from durably.backends import _queries

    async with Durably(pg_url):
        pass  # the schema as shipped
    shipped = _queries.migrations
    next_release = (999, "0999_next.sql", text)
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


async def _end(conn: Any, ends: str) -> None:
    """End the body's transaction as `ends` says: a method of the connection, `with conn:`
    around a write (the sqlite3 docs' idiom), or SQL (upper case)."""
    if ends == "with":
        if isinstance(conn, sqlite3.Connection):
            with conn:
                await _insert(conn, "k0")
        else:
            async with conn:
                await _insert(conn, "k0")
        return
    result = conn.execute(ends) if ends.isupper() else getattr(conn, ends)()
    if inspect.isawaitable(result):
        await result


@pytest.mark.parametrize("ends", ["commit", "rollback", "close", "with", "COMMIT", "ROLLBACK"])
async def test_a_body_cannot_end_its_own_transaction(db_url: str, ends: str) -> None:
    """The business write commits with the step's record or not at all: a body that
    commits (or rolls back, and writes on outside the step's transaction, or closes the
    connection) fails its attempt, and the next attempt (by policy) is the one that
    commits. psycopg refuses commit() and rollback() inside a `transaction()` block; the
    engine's sqlite3 connection refuses all three while a body holds it, `with conn:`, and
    SQL that ends the transaction (even if the body swallows the refusal, as it does SQL's
    here). psycopg cannot refuse close() or SQL: the attempt fails when the body returns
    (a COMMIT has committed what the body wrote before it: nothing can undo that)."""
    postgres = db_url.startswith("postgresql")
    if ends == "ROLLBACK" and postgres:
        pytest.skip("psycopg begins a transaction again for the writes after it: they "
                    "commit with the step's record, or not at all")  # fmt: skip
    _business_table(db_url)
    app = Durably(db_url)
    tries: list[int] = []

    async def body(conn: Any) -> None:
        tries.append(1)
        if len(tries) > 1:  # the next attempt
            await _insert(conn, "k2")
            return
        try:
            if ends.lower() == "rollback":
                await _end(conn, ends)
            await _insert(conn, "k1")
            if ends.lower() != "rollback":
                await _end(conn, ends)
        except Exception:
            if not ends.isupper():
                raise

    @app.workflow(name="wf")
    async def wf(ctx: Any) -> None:
        await ctx.step.transaction("register", body, retry=RetryPolicy(max_attempts=2))

    async with app, app.worker():
        handle = await wf.start()
        await handle.result(timeout=scaled(10))
        steps = await app.list_steps(handle.run_id)
    assert len(tries) == 2, tries
    assert _library(db_url) == (["k1", "k2"] if postgres and ends == "COMMIT" else ["k2"])
    assert [(s.attempt, s.status) for s in steps] == [(1, "failed"), (2, "completed")]
    if not postgres or ends in ("close", "COMMIT"):  # psycopg's own refusals say otherwise
        assert "step.transaction body cannot" in str(steps[0].error), steps[0].error


async def test_a_claim_takes_over_a_run_whose_transaction_body_runs(pg_url: str) -> None:
    """A body's transaction holds no lock on its run while the body runs: a claim (here by
    another worker, once the lease has run out) is not held up by it. The fence is checked
    again as the step is recorded, at the end of the transaction: a run taken over in the
    meantime makes it raise LeaseLostError, and the business write is rolled back."""
    _business_table(pg_url)
    app = Durably(pg_url)
    inside, release = threading.Event(), threading.Event()

    async def held(conn: Any) -> None:
        await _insert(conn, "k1")
        inside.set()
        await asyncio.to_thread(release.wait, scaled(30))

    @app.workflow(name="held", version="v1")
    async def wf(ctx: Any) -> None:
        await ctx.step.transaction("register", held, retry=RetryPolicy(max_attempts=1))

    async with app:
        handle = await wf.start()
        async with app.worker(lease="30s", heartbeat="10s"):
            try:
                await eventually(inside.is_set, what="the body inside its transaction")
                with psycopg.connect(pg_url, autocommit=True) as conn:  # as if A were frozen
                    conn.execute(
                        "UPDATE durably.runs SET lease_expires_at = now(), available_at = now()"
                        " WHERE id = %s",
                        (handle.run_id,),
                    )
                claimed = await asyncio.wait_for(
                    app.store.claim("thief", [("held", "v1")], 1, 30.0), scaled(10)
                )
                assert [row["id"] for row in claimed] == [handle.run_id]
            finally:
                release.set()
            await eventually(lambda: _attempts(pg_url, handle.run_id) is not None,
                             what="the body to end")  # fmt: skip
    assert _library(pg_url) == []


def _attempts(url: str, run_id: str) -> list[str] | None:
    """The run's attempt statuses, once the worker has let go of it (None before)."""
    with psycopg.connect(url) as conn:
        active = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'idle in transaction'"
        ).fetchone()
        if active is None or active[0]:
            return None
        rows = conn.execute("SELECT status FROM durably.step_attempts WHERE run_id = %s",
                            (run_id,))  # fmt: skip
        return [str(r[0]) for r in rows]


async def test_a_body_idle_in_its_transaction_for_a_lease_fails_its_attempt(pg_url: str) -> None:
    """The server ends a body's transaction left idle for a lease (what frees a frozen
    worker's locks): a live body that waits that long on something else, inside its
    transaction, fails that attempt, and is retried by policy."""
    _business_table(pg_url)
    app = Durably(pg_url)
    tries: list[int] = []

    async def slow(conn: Any) -> None:
        tries.append(len(tries))
        await _insert(conn, f"k{len(tries)}")
        if len(tries) == 1:
            await asyncio.sleep(scaled(1.5))  # idle, the lease renewed all along
        await conn.execute("SELECT 1")

    @app.workflow(name="idle", version="v1")
    async def wf(ctx: Any) -> None:
        await ctx.step.transaction("register", slow, retry=RetryPolicy(max_attempts=2))

    async with app, app.worker(lease=f"{scaled(1):g}s", heartbeat=f"{scaled(0.2):g}s"):
        handle = await wf.start()
        await handle.result(timeout=scaled(20))
        steps = await app.list_steps(handle.run_id)
    assert _library(pg_url) == ["k2"]
    assert [s.status for s in steps] == ["failed", "completed"]
    assert "idle-in-transaction timeout" in str(steps[0].error)


async def test_a_cancel_interrupts_a_transaction_body_at_once(pg_url: str) -> None:
    """A run canceled (or whose lease is lost) while a `step.transaction` body runs has
    that body interrupted at once, like any step body (README: within 1 s), and its write
    rolled back: the body's transaction does not go on after the run was let go (it went
    on until the execution's lifecycles were cancelled, 10 s later). On SQLite nothing can
    cancel the run meanwhile: the body's transaction holds the file's write lock."""
    db_url = pg_url
    _business_table(db_url)
    app = Durably(db_url)
    inside = asyncio.Event()

    async def held(conn: Any) -> None:
        await _insert(conn, "k1")
        inside.set()
        await asyncio.sleep(scaled(60))

    @app.workflow(name="held", version="v1")
    async def wf(ctx: Any) -> None:
        await ctx.step.transaction("register", held)

    async with app, app.worker() as worker:
        handle = await wf.start()
        await eventually(inside.is_set, what="the body inside its transaction")
        await app.cancel(handle.run_id)
        loop = asyncio.get_running_loop()
        canceled_at = loop.time()
        await eventually(lambda: handle.run_id not in worker.running, timeout=3,
                         what="the worker to let go of the run")  # fmt: skip
        took = loop.time() - canceled_at
    assert took < scaled(1.5), took
    assert _library(db_url) == []
