"""durably.testing: an in-process environment whose clock skips to the next timer."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import psycopg
import pytest

from durably import ConfigurationError, Durably, RunFailedError, WorkflowContext
from durably.testing import Environment


@pytest.fixture
def env_db(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else db_url


async def test_skip_time_jumps_to_each_timer(env_db: str) -> None:
    app = Durably()

    @app.workflow(name="retention", version="v1")
    async def retention(ctx: WorkflowContext, order_id: str) -> str:
        await ctx.step.run("submit", str.upper, order_id)
        got = await ctx.step.wait_for_signal(f"paid:{order_id}", timeout="3 days")
        await ctx.step.sleep("retention", "7 days")
        return f"cleaned {order_id} after {got}"

    async with Environment(app, database=env_db) as env:
        start = env.now()
        handle = await retention.start("o1")
        jumped = await env.skip_time()  # the signal wait times out
        assert timedelta(days=2, hours=23) < jumped <= timedelta(days=3, seconds=1)
        await env.wait_until_idle()
        assert (await handle.get()).waiting_for == "sleep:retention"
        await env.skip_time()
        assert await handle.result(timeout="10s") == "cleaned o1 after None"
        assert env.now() - start >= timedelta(days=10)
        assert await env.skip_time() == timedelta(0)  # nothing left to wait for
    assert app.url != env_db and not app._opened  # the app is given back as it was


async def test_auto_skip_while_a_result_is_awaited(env_db: str) -> None:
    app = Durably()

    @app.workflow(name="nap", version="v1")
    async def nap(ctx: WorkflowContext) -> int:
        for i in range(3):
            await ctx.step.sleep(f"day-{i}", "1 day")
        return 3

    async with Environment(app, database=env_db, auto_skip=True) as env:
        handle = await nap.start()
        assert await handle.result(timeout="20s") == 3
        assert env.now() - (await handle.get()).created_at >= timedelta(days=3)


async def test_ctx_now_reads_the_skipped_clock(env_db: str) -> None:
    app = Durably()

    @app.workflow(name="stamps", version="v1")
    async def stamps(ctx: WorkflowContext) -> list[str]:
        before = ctx.now()
        await ctx.step.sleep("wait", "2 days")
        return [before.isoformat(), ctx.now().isoformat()]

    async with Environment(app, database=env_db, auto_skip=True) as env:
        handle = await stamps.start()
        before, after = map(datetime.fromisoformat, await handle.result(timeout="20s"))
        assert timedelta(days=2) <= after - before < timedelta(days=2, minutes=1)
        assert after <= env.now()


async def test_workflow_code_that_replays_differently_fails_its_run(env_db: str) -> None:
    """In an environment the code under test is the only code: a replay that does not
    match is its own non-determinism, and the run fails with it (a worker elsewhere holds
    such a run for a fix; here, its back-off skipped, it would be claimed without end)."""
    app, names = Durably(), itertools.count()

    async def one() -> int:
        return 1

    @app.workflow(name="drifts", version="v1")
    async def drifts(ctx: WorkflowContext) -> int:
        await ctx.step.run(f"step-{next(names)}", one)  # a name that changes at each replay
        await ctx.step.sleep("nap", "1 day")
        return 1

    async with Environment(app, database=env_db, auto_skip=True):
        handle = await drifts.start()
        with pytest.raises(RunFailedError, match=r"NonDeterminismError.*'step-0'.*'step-1'"):
            await handle.result(timeout="20s")
        assert (await handle.get()).status == "failed"


async def test_a_signal_sent_before_skipping_wins(sqlite_url: str) -> None:
    app = Durably()

    @app.workflow(name="pay", version="v1")
    async def pay(ctx: WorkflowContext) -> object:
        return await ctx.step.wait_for_signal("paid", timeout="1h")

    async with Environment(app) as env:
        handle = await pay.start()
        await env.wait_until_idle()
        await app.send_signal("paid", {"amount": 3})
        await env.skip_time()
        assert await handle.result(timeout="10s") == {"amount": 3}


def test_bad_database_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="sqlite"):
        Environment(Durably(), database="mysql://x")


async def test_skip_time_sees_queued_workflows(env_db: str) -> None:
    """Issue 31: `next_due` skipped runs of declared queues, so `skip_time()` returned 0
    and `auto_skip` hung; on PostgreSQL a jump while a queued run was claimed lost its
    lease."""
    app = Durably()
    orders = app.queue("orders", concurrency=2, per_key=1)

    @app.workflow(name="order", version="v1", queue=orders)
    async def order(ctx: WorkflowContext, order_id: str) -> str:
        await ctx.step.run("validate", str.upper, order_id)
        await ctx.step.sleep("cool-off", "2 days")
        return await ctx.step.run("ship", str.upper, f"shipped {order_id}")

    async with Environment(app, database=env_db) as env:
        handles = [await order.start(f"o{i}", concurrency_key=f"k{i % 2}") for i in range(4)]
        jumped = await env.skip_time()
        assert timedelta(days=1, hours=23) < jumped <= timedelta(days=2, seconds=1)
        for _ in range(4):  # each key's second run sleeps after the first ends
            if all([(await h.get()).status == "completed" for h in handles]):
                break
            await env.skip_time("2 days")
        assert [await h.result(timeout="10s") for h in handles] == [
            f"SHIPPED O{i}" for i in range(4)
        ]


async def test_auto_skip_with_a_queued_workflow(env_db: str) -> None:
    app = Durably()
    slow = app.queue("slow", concurrency=1)

    @app.workflow(name="later", version="v1", queue=slow)
    async def later(ctx: WorkflowContext) -> str:
        await ctx.step.sleep("wait", "3 days")
        return "done"

    async with Environment(app, database=env_db, auto_skip=True):
        first, second = await later.start(), await later.start()
        assert await first.result(timeout="20s") == "done"
        assert await second.result(timeout="20s") == "done"


async def test_each_postgres_environment_has_a_schema_of_its_own(pg_url: str) -> None:
    """Issue 31: an environment on a PostgreSQL URL reused what the database held: an
    earlier test's run of the same workflow was claimed (and failed) by the next test."""
    for attempt in range(2):
        app = Durably()

        @app.workflow(name="same", version="v1")
        async def same(ctx: WorkflowContext, n: int) -> int:
            return await ctx.step.run("double", lambda: n * 2)

        async with Environment(app, database=pg_url) as env:
            assert await app.list_runs() == []  # nothing left by the last environment
            await same.start(attempt, available_at=env.now() + timedelta(days=1))
    with psycopg.connect(pg_url) as conn:  # every schema the environments made is gone
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'durably%'"
        ).fetchall()
    assert left == []


# Requests (SPEC §4.22): answered in the environment; a wait for one times out by skipping.
async def test_a_request_is_answered_and_a_wait_times_out_by_skipping(env_db: str) -> None:
    app = Durably()

    @app.workflow(name="desk", version="v1")
    async def desk(ctx: WorkflowContext) -> str:
        req = await ctx.step.wait_for_request("ask", timeout="2 days")
        assert req is not None
        await ctx.step.reply(req, f"hello {req.data}")
        late = await ctx.step.wait_for_request("ask", timeout="2 days")
        return "none" if late is None else "got"

    async with Environment(app, database=env_db) as env:
        start = env.now()
        handle = await desk.start()
        assert await app.request(handle.run_id, "ask", "ana", timeout="20s") == "hello ana"
        await env.wait_until_idle()
        jumped = await env.skip_time()  # the second wait times out
        assert timedelta(days=1, hours=23) < jumped <= timedelta(days=2, seconds=1)
        assert await handle.result(timeout="10s") == "none"
        assert env.now() - start >= timedelta(days=2)
