"""Signals (§4.3), cancellation (§4.5), children, deadlines and compensations (§4.10)."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from typing import Any

import pytest

from durably import (
    ChildWorkflowError,
    Durably,
    RetryPolicy,
    RunFailedError,
    RunTerminalError,
    StepContext,
    WorkflowTimeoutError,
)
from durably.execution.execution import Execution
from durably.store.sends import Sends
from tests.helpers import duration, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


async def test_signal_fan_out_buffering_and_addressing(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="waiter", version="v1")
    async def waiter(ctx: Any, topic: str) -> Any:
        return await ctx.step.wait_for_signal(topic, timeout=duration(30))

    async with app, app.worker():
        a, b = await waiter.start("t"), await waiter.start("t")
        await eventually(lambda: _both_waiting(app, a.run_id, b.run_id), what="two waiters")
        sent = await app.send_signal("t", {"n": 1})
        assert sorted(sent["delivered_to"]) == sorted([a.run_id, b.run_id])
        assert await a.result(timeout=scaled(10)) == {"n": 1} == await b.result(timeout=scaled(10))

        # No waiter: buffered; received in send order, each exactly once.
        for n in (1, 2, 3):
            assert (await app.send_signal("q", n))["buffered"] is True
        handles = [await waiter.start("q") for _ in range(3)]
        got = sorted([await h.result(timeout=scaled(10)) for h in handles])
        assert got == [1, 2, 3]

        # Addressed to one run: the other waiter does not get it.
        c, d = await waiter.start("addr"), await waiter.start("addr")
        await eventually(lambda: _both_waiting(app, c.run_id, d.run_id), what="two waiters")
        res = await app.send_signal("addr", "only-c", run_id=c.run_id)
        assert res["delivered_to"] == [c.run_id]
        assert await c.result(timeout=scaled(10)) == "only-c"
        assert await _status(app, d.run_id, "waiting")
        with pytest.raises(RunTerminalError, match="completed"):
            await app.send_signal("addr", "late", run_id=c.run_id)
        await app.cancel(d.run_id)


async def _both_waiting(app: Durably, *run_ids: str) -> bool:
    return all([await _status(app, r, "waiting") for r in run_ids])


async def test_signal_timeout_returns_none_and_is_recorded(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="timeout", version="v1")
    async def wf(ctx: Any) -> Any:
        got = await ctx.step.wait_for_signal("never", timeout="100ms")
        await ctx.step.sleep("after", "10ms")  # a replay must see the same None
        return {"got": got}

    async with app, app.worker():
        handle = await wf.start()
        assert await handle.result(timeout=scaled(10)) == {"got": None}
        assert (await app.send_signal("never", 1))["buffered"] is True


async def test_a_signal_sent_as_its_wait_begins_is_received_at_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send reaches a wait just recorded, and its poke finds the wait's lifecycle still
    running: the poke is kept for the lifecycle's end. The run does not park (a step beside
    the wait works on), so nothing else would take the wait up before the next heartbeat."""
    app = Durably(db_url)
    pokes: list[str] = []
    poke, begin = Execution.poke, Sends.begin_signal_wait

    def counted(self: Execution) -> None:
        pokes.append(self.run_id)
        poke(self)

    async def send_as_it_begins(self: Sends, *args: Any) -> Any:
        began = await begin(self, *args)
        await app.send_signal("go", "now")  # delivered to the wait just recorded
        await eventually(lambda: pokes, what="the send's poke")  # the lifecycle is busy
        return began

    monkeypatch.setattr(Execution, "poke", counted)
    monkeypatch.setattr(Sends, "begin_signal_wait", send_as_it_begins)

    async def busy(ctx: StepContext) -> bool:
        """Works until the wait beside it has received its signal (True), or gives up."""

        async def received() -> bool:
            steps = await app.list_steps(ctx.fence.run_id)
            return any(s.kind == "signal-wait" and s.status == "completed" for s in steps)

        try:
            await eventually(received, timeout=3, what="the wait to receive its signal")
        except AssertionError:
            return False
        return True

    @app.workflow(name="go", version="v1")
    async def go(ctx: Any) -> Any:
        return await asyncio.gather(
            ctx.step.wait_for_signal("go", timeout=duration(60)), ctx.step.run("busy", busy)
        )

    # Heartbeats far apart: the next would poke again (the run's `wake_requested`).
    async with app, app.worker(lease=duration(90), heartbeat=duration(30)):
        handle = await go.start()
        assert await handle.result(timeout=scaled(10)) == ["now", True]


async def test_cancel_interrupts_async_and_sync_bodies(db_url: str) -> None:
    app = Durably(db_url)
    stopped = threading.Event()
    after: list[str] = []

    async def long_async() -> None:
        await asyncio.sleep(60)

    def long_sync(ctx: StepContext) -> None:
        while not ctx.cancelled.wait(0.01):
            pass
        stopped.set()

    @app.workflow(name="slow", version="v1")
    async def slow(ctx: Any, mode: str) -> None:
        await ctx.step.run("long", long_async if mode == "async" else long_sync)
        await ctx.step.run("after", lambda: after.append(mode))

    async with app, app.worker():
        for mode in ("async", "sync"):
            handle = await slow.start(mode)
            running = functools.partial(_step_running, app, handle.run_id)
            await eventually(running, what="the step")
            began = time.monotonic()
            assert (await app.cancel(handle.run_id)).status == "canceled"
            if mode == "sync":
                await eventually(lambda: stopped.is_set(), timeout=1, what="ctx.cancelled")
            assert time.monotonic() - began < scaled(1)
            steps = await app.list_steps(handle.run_id)
            assert [(s.step, s.status) for s in steps] == [("long", "canceled")]
            with pytest.raises(RunTerminalError, match="already canceled"):
                await app.cancel(handle.run_id)
    assert after == []


async def _step_running(app: Durably, run_id: str) -> bool:
    return any(s.status == "running" for s in await app.list_steps(run_id))


async def test_children_results_failures_and_timeouts(db_url: str) -> None:
    app = Durably(db_url)
    started: list[int] = []

    @app.workflow(name="child", version="v1")
    async def child(ctx: Any, n: int) -> int:
        started.append(n)
        if n < 0:
            await ctx.step.run("boom", _boom, retry=ONCE)
        if n == 0:
            await ctx.step.sleep("forever", "1h")
        return n * 10

    @app.workflow(name="parent", version="v1")
    async def parent(ctx: Any) -> dict[str, Any]:
        ok = await ctx.step.run_workflow(child, 4)
        try:
            await ctx.step.run_workflow(child, -1, name="failing-child")
            failed = "no"
        except ChildWorkflowError as exc:
            failed = exc.status
        try:
            await ctx.step.run_workflow(child, 0, timeout="200ms", name="slow-child")
            timed_out = False
        except WorkflowTimeoutError:
            timed_out = True
        await ctx.step.sleep("replay", "10ms")
        return {"ok": ok, "failed": failed, "timed_out": timed_out}

    async with app, app.worker():
        handle = await parent.start()
        expected = {"ok": 40, "failed": "failed", "timed_out": True}
        assert await handle.result(timeout=scaled(20)) == expected
        children = [r for r in await app.list_runs(workflow="child")]
        assert sorted(r.status for r in children) == ["canceled", "completed", "failed"]
        assert all(r.parent_run_id == handle.run_id for r in children)
    assert sorted(started) == [-1, 0, 4]  # replays never started a second child


def _boom() -> None:
    raise RuntimeError("child failed")


async def test_cancel_cascades_to_a_child_in_the_middle_of_a_step(db_url: str) -> None:
    app = Durably(db_url)

    async def forever() -> None:
        await asyncio.sleep(60)

    @app.workflow(name="kid", version="v1")
    async def kid(ctx: Any) -> None:
        await ctx.step.run("forever", forever)

    @app.workflow(name="mom", version="v1")
    async def mom(ctx: Any) -> None:
        await ctx.step.run_workflow(kid, None)

    async with app, app.worker():
        handle = await mom.start()
        kid_run = await eventually(lambda: _running_kid(app), what="the child's step")
        await app.cancel(handle.run_id)
        await eventually(lambda: _status(app, kid_run, "canceled"), what="the cascade")
        steps = await app.list_steps(kid_run)
        assert [(s.step, s.status) for s in steps] == [("forever", "canceled")]


async def _running_kid(app: Durably) -> str | None:
    for r in await app.list_runs(workflow="kid"):
        if await _step_running(app, r.run_id):
            return r.run_id
    return None


async def test_deadline_cancels_the_step_in_flight(db_url: str) -> None:
    app = Durably(db_url)

    async def slow() -> None:
        await asyncio.sleep(60)

    @app.workflow(name="late", version="v1")
    async def late(ctx: Any) -> None:
        await ctx.step.run("slow", slow)

    async with app, app.worker():
        handle = await late.start(deadline_at=f"+{duration(0.3)}")  # after the step starts
        with pytest.raises(RunFailedError, match="DeadlineExceeded"):
            await handle.result(timeout=scaled(10))
        steps = await app.list_steps(handle.run_id)
        assert [(s.step, s.status) for s in steps] == [("slow", "canceled")]


async def test_compensations_run_newest_first_once_each(db_url: str) -> None:
    app = Durably(db_url)
    undone: list[str] = []

    def do(name: str) -> str:
        return name

    def undo(result: str) -> None:
        undone.append(result)

    @app.workflow(name="saga", version="v1")
    async def saga(ctx: Any, fail: bool) -> None:
        await ctx.step.run("a", do, "a", compensate=undo)
        await ctx.step.run("b", do, "b")
        await ctx.step.run("c", do, "c", compensate=undo)
        if fail:
            await ctx.step.run("boom", _boom, retry=ONCE)
        await ctx.step.wait_for_signal("never")

    async with app, app.worker():
        failed = await saga.start(True)
        with pytest.raises(RunFailedError):
            await failed.result(timeout=scaled(10))
        assert undone == ["c", "a"]
        steps = [(s.step, s.status) for s in await app.list_steps(failed.run_id)]
        assert steps[-2:] == [("compensate:c", "completed"), ("compensate:a", "completed")]

        undone.clear()
        canceled = await saga.start(False)
        await eventually(lambda: _status(app, canceled.run_id, "waiting"), what="the wait")
        await app.cancel(canceled.run_id)
        await eventually(lambda: _compensated(app, canceled.run_id), what="compensations")
        assert undone == ["c", "a"]
        assert (await app.get_run(canceled.run_id)).status == "canceled"


async def _compensated(app: Durably, run_id: str) -> bool:
    steps = await app.list_steps(run_id)
    run = await app.get_run(run_id)
    done = [s for s in steps if s.step.startswith("compensate:") and s.status == "completed"]
    return len(done) == 2 and run.worker_id is None
