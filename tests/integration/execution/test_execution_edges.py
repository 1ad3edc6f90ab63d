"""Edge cases an adversarial review of the execution layer found, each reproduced first:
cancels racing a failure, limits, fire-and-forget children, signals between workflow
attempts and to abandoned waits, timers beside running bodies, missed NOTIFYs, a NUL in an
error, business errors inside `step.transaction`, long transactions and the heartbeat."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from durably import Durably, NonRetryableError, RetryPolicy
from durably.testing import Environment
from tests.helpers import eventually, scaled

ONCE = RetryPolicy(max_attempts=1)


async def _steps(app: Durably, run_id: str) -> list[tuple[str, int, str]]:
    return [(s.step, s.attempt, s.status) for s in await app.list_steps(run_id)]


# 1 ------------------------------------------------------------------------------------
async def test_cancel_during_failure_compensation_runs_undo_twice(db_url: str) -> None:
    app = Durably(db_url)
    undone: list[str] = []
    in_undo = asyncio.Event()
    release = asyncio.Event()

    async def charge() -> str:
        return "charged"

    async def undo(value: str) -> None:
        undone.append(value)
        in_undo.set()
        await release.wait()

    def boom() -> None:
        raise NonRetryableError("boom")

    @app.workflow(name="fails", version="v1")
    async def fails(ctx: Any) -> None:
        await ctx.step.run("charge", charge, compensate=undo)
        await ctx.step.run("boom", boom)

    async with app, app.worker():
        handle = await fails.start()
        await asyncio.wait_for(in_undo.wait(), scaled(10))
        await app.cancel(handle.run_id)  # user cancels a run that is failing
        release.set()
        await handle.wait(timeout=scaled(20))
    assert undone == ["charged"], f"undo ran {len(undone)} times"


# 2 ------------------------------------------------------------------------------------
async def test_step_limit_reached_with_a_compensation_escapes(db_url: str) -> None:
    app = Durably(db_url, max_step_attempts=2)
    undone: list[str] = []

    async def charge() -> str:
        return "charged"

    def undo(value: str) -> None:
        undone.append(value)

    async def ok() -> int:
        return 1

    @app.workflow(name="limit", version="v1")
    async def limit(ctx: Any) -> None:
        await ctx.step.run("charge", charge, compensate=undo)
        await ctx.step.run("two", ok)
        await ctx.step.run("three", ok)  # 3rd attempt > 2: StepLimitExceeded

    async with app, app.worker(lease="1s", heartbeat="300ms"):
        handle = await limit.start()
        run = await handle.wait(timeout=scaled(6))
    assert run.status == "failed", run


# 3 ------------------------------------------------------------------------------------
async def test_start_workflow_then_return_never_starts_the_child(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="kid", version="v1")
    async def kid(ctx: Any) -> str:
        return "kid done"

    @app.workflow(name="fire", version="v1")
    async def fire(ctx: Any) -> Any:
        h = ctx.step.start_workflow(kid, on_parent_close="abandon")
        return h.run_id

    async with app, app.worker():
        handle = await fire.start()
        run = await handle.wait(timeout=scaled(10))
        assert run.status == "completed", run.error
        kids = [r for r in await app.list_runs(workflow="kid") if r.parent_run_id == run.run_id]
        assert kids, "fire-and-forget child was never started"


# 4 ------------------------------------------------------------------------------------
async def test_signal_sent_between_workflow_attempts_is_lost(db_url: str) -> None:
    app = Durably(db_url)
    attempt_seen: list[int] = []
    gate = asyncio.Event()

    async def fail_once(attempt: int) -> None:
        if attempt == 1:
            raise NonRetryableError("first attempt fails")

    async def hold() -> None:
        await gate.wait()

    @app.workflow(
        name="retried", version="v1", retry=RetryPolicy(max_attempts=2, initial_interval="30s")
    )
    async def retried(ctx: Any) -> Any:
        attempt_seen.append(ctx.attempt)
        sig, _ = await ctx.gather(
            ctx.step.wait_for_signal("go"), ctx.step.run("fail", fail_once, ctx.attempt)
        )
        return sig

    database = "sqlite" if db_url.startswith("sqlite") else db_url
    async with Environment(app, database=database) as env:  # the back-off is skipped
        handle = await retried.start()
        await env.wait_until_idle()
        # attempt 1 failed and is pending its retry (30s back-off, skipped)
        assert await _run_attempts(app, handle.run_id, 2)
        await app.send_signal("go", {"v": 1})
        assert await env.skip_time() >= timedelta(seconds=1)
        run = await handle.wait(timeout=scaled(8))
    assert run.status == "completed", run


async def _run_attempts(app: Durably, run_id: str, n: int) -> bool:
    r = await app.get_run(run_id)
    return r.attempts == n and r.status == "pending"


# 5 ------------------------------------------------------------------------------------
async def test_wait_first_sleep_as_timeout_does_not_fire_while_a_body_runs(db_url: str) -> None:
    app = Durably(db_url)

    async def slow() -> str:
        await asyncio.sleep(60)
        return "slow"

    @app.workflow(name="timeout", version="v1")
    async def timeout_wf(ctx: Any) -> Any:
        i, _v = await ctx.wait_first(ctx.step.run("slow", slow), ctx.step.sleep("t", "200ms"))
        return i

    async with app, app.worker():
        handle = await timeout_wf.start()
        run = await handle.wait(timeout=scaled(30))
        steps = await _steps(app, handle.run_id)
    assert run.output == 1, run  # the time-out fired while the body still ran
    assert ("slow", 1, "canceled") in steps


# 6 ------------------------------------------------------------------------------------
async def test_body_raising_cancelled_error_gets_a_misleading_failure(db_url: str) -> None:
    app = Durably(db_url)
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise asyncio.CancelledError("library leaked a CancelledError")
        return "ok"

    @app.workflow(name="flaky", version="v1")
    async def flaky_wf(ctx: Any) -> Any:
        return await ctx.step.run("flaky", flaky, retry=RetryPolicy(initial_interval="10ms"))

    async with app, app.worker():
        handle = await flaky_wf.start()
        run = await handle.wait(timeout=scaled(10))
    assert run.status == "completed", run.error


# 7 ------------------------------------------------------------------------------------
async def test_nul_in_a_workflow_error_loops_on_lease_expiry(pg_url: str) -> None:
    app = Durably(pg_url)

    @app.workflow(name="nul", version="v1")
    async def nul(ctx: Any) -> None:
        raise ValueError("bad byte \x00 in input")

    async with app, app.worker(lease="1s", heartbeat="300ms"):
        handle = await nul.start()
        run = await handle.wait(timeout=scaled(5))
    assert run.status == "failed"


async def test_nul_in_one_steps_error_fails_other_runs_in_its_batch(pg_url: str) -> None:
    app = Durably(pg_url)
    go = asyncio.Event()
    waiting: list[int] = []

    async def step(i: int) -> int:
        waiting.append(i)
        await go.wait()
        if i == 0:
            raise ValueError("bad byte \x00")
        return i

    @app.workflow(name="many", version="v1")
    async def many(ctx: Any, i: int) -> Any:
        return await ctx.step.run("s", step, i, retry=RetryPolicy(max_attempts=1))

    async with app, app.worker(concurrency=40):
        handles = [await many.start(i) for i in range(1, 20)]
        await eventually(lambda: len(waiting) == 19, what="19 waiting")
        await many.start(0)
        await eventually(lambda: len(waiting) == 20, what="20 waiting")
        go.set()
        runs = [await h.wait(timeout=scaled(20)) for h in handles]
    bad = [
        (r.input, r.status, (r.error or {}).get("message", "")[:100])
        for r in runs
        if r.status != "completed"
    ]
    assert not bad


# 8 ------------------------------------------------------------------------------------
async def test_one_signal_satisfies_every_concurrent_wait_of_one_run(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="approvals", version="v1")
    async def approvals(ctx: Any) -> Any:
        return await ctx.gather(
            *(ctx.step.wait_for_signal("approve", name=f"a{i}") for i in range(3))
        )

    async with app, app.worker():
        handle = await approvals.start()
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="waiting")
        await app.send_signal("approve", {"by": "alice"})
        delivered = await eventually(lambda: _completed_waits(app, handle.run_id),
                                     what="the one wait the signal reached")  # fmt: skip
        assert delivered == ["a0"]  # one approval satisfies one wait, the earliest
        await app.send_signal("approve", {"by": "bob"})
        await app.send_signal("approve", {"by": "carol"})
        run = await handle.wait(timeout=scaled(10))
    assert run.output == [{"by": "alice"}, {"by": "bob"}, {"by": "carol"}]


async def _completed_waits(app: Durably, run_id: str) -> list[str]:
    return [s.step for s in await app.list_steps(run_id) if s.status == "completed"]


async def _is(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


# 9 ------------------------------------------------------------------------------------
async def test_wait_first_loser_signal_wait_swallows_the_next_signal(db_url: str) -> None:
    app = Durably(db_url)
    go = asyncio.Event()

    async def gate() -> None:
        await go.wait()

    @app.workflow(name="poll", version="v1")
    async def poll(ctx: Any) -> Any:
        _i, _ = await ctx.wait_first(
            ctx.step.wait_for_signal("x", name="w1"), ctx.step.sleep("t1", "100ms")
        )
        await ctx.step.run("between", gate)  # the signal is sent here
        return await ctx.step.wait_for_signal("x", name="w2", timeout="3s")

    async with app, app.worker():
        handle = await poll.start()
        await eventually(lambda: _has(app, handle.run_id, "between"), what="between")
        await app.send_signal("x", {"n": 1})
        go.set()
        run = await handle.wait(timeout=scaled(10))
    assert run.output == {"n": 1}


async def _has(app: Durably, run_id: str, step: str) -> bool:
    return any(s.step == step for s in await app.list_steps(run_id))


# 10 -----------------------------------------------------------------------------------
async def test_a_cancel_whose_notify_is_lost_still_stops_later_steps(
    pg_url: str, fault_proxy: Any
) -> None:
    """The worker's connections (LISTEN included) are cut just before the cancel, so its
    NOTIFY is lost: the next record's answer, the heartbeat, or (if that write fails) the
    next claim must stop the run before step b."""
    app = Durably(fault_proxy.url_for(pg_url))
    client = Durably(pg_url)
    gate = asyncio.Event()
    ran: list[str] = []

    async def a() -> None:
        await gate.wait()

    async def b() -> None:
        ran.append("b")

    @app.workflow(name="cx", version="v1")
    async def cx(ctx: Any) -> None:
        await ctx.step.run("a", a)
        await ctx.step.run("b", b)

    async with app, client, app.worker(lease="1s", heartbeat="0.3s"):
        handle = await cx.start()
        await eventually(lambda: _has(client, handle.run_id, "a"), what="a running")
        fault_proxy.cut()
        await client.cancel(handle.run_id)
        gate.set()
        run = await client.handle(handle.run_id).wait(timeout=scaled(20))
    assert run.status == "canceled"
    assert ran == [], "step b ran after the run was canceled"


# 12 -----------------------------------------------------------------------------------
async def test_business_statement_timeout_in_a_transaction_loops_on_lease_expiry(
    pg_url: str,
) -> None:
    app = Durably(pg_url)
    calls: list[int] = []

    async def slow_write(conn: Any) -> None:
        calls.append(1)
        await conn.execute("SET LOCAL statement_timeout = '50ms'")
        await conn.execute("SELECT pg_sleep(1)")  # the business query times out

    @app.workflow(name="tx", version="v1")
    async def tx(ctx: Any) -> None:
        await ctx.step.transaction(
            "w", slow_write, retry=RetryPolicy(max_attempts=2, initial_interval="10ms")
        )

    async with app, app.worker(lease="1s", heartbeat="300ms"):
        handle = await tx.start()
        run = await handle.wait(timeout=scaled(6))
    assert run.status == "failed" and len(calls) == 2


# 13 -----------------------------------------------------------------------------------
async def test_a_long_transaction_step_blocks_the_heartbeat_of_every_run(pg_url: str) -> None:
    app = Durably(pg_url)
    b_calls: list[int] = []

    async def long_write(conn: Any) -> None:
        await conn.execute("SELECT pg_sleep(4)")

    async def b_body() -> None:
        b_calls.append(1)
        await asyncio.sleep(5)

    @app.workflow(name="ta", version="v1")
    async def ta(ctx: Any) -> None:
        await ctx.step.transaction("w", long_write)

    @app.workflow(name="tb", version="v1")
    async def tb(ctx: Any) -> None:
        await ctx.step.run("b", b_body)

    async with app, app.worker(lease="2s", heartbeat="500ms", poll_interval="200ms"):
        hb = await tb.start()
        await eventually(lambda: b_calls, what="b running")
        ha = await ta.start()
        await hb.wait(timeout=scaled(20))
        await ha.wait(timeout=scaled(20))
    assert len(b_calls) == 1, "b's body ran again although its worker was alive"


async def test_a_child_canceled_for_its_time_out_reads_as_a_time_out(db_url: str) -> None:
    """Found by the chaos soak: a claim cancels a timed-out child and dies before it records
    the time-out; the next claim must still see a time-out, not a canceled child."""
    app = Durably(db_url)

    @app.workflow(name="slowkid", version="v1")
    async def slowkid(ctx: Any) -> Any:
        return await ctx.step.wait_for_signal("never")

    @app.workflow(name="waiter", version="v1")
    async def waiter(ctx: Any) -> Any:
        try:
            return await ctx.step.run_workflow(slowkid, None, timeout="1h")
        except Exception as exc:
            return type(exc).__name__

    async with app, app.worker():
        handle = await waiter.start()
        kid = await eventually(lambda: _kid_of(app, handle.run_id), what="the child")
        # What the dead claim did before it could record the time-out:
        await app.store.cancel(kid, {"type": "WorkflowTimeoutError", "message": "stopped"})
        run = await handle.wait(timeout=scaled(20))
    assert run.output == "WorkflowTimeoutError"


async def _kid_of(app: Durably, run_id: str) -> str | None:
    kids = [r for r in await app.list_runs(workflow="slowkid") if r.parent_run_id == run_id]
    return kids[0].run_id if kids and kids[0].status == "waiting" else None
