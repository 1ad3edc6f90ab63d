"""Sync workflows (a plain `def`), in process, on both backends: every kind of step,
replay after parking, failures, misuse refused at the call, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from typing import Any

import pytest

from durably import (
    Durably,
    RetryPolicy,
    StepContext,
    StepFailedError,
    SyncWorkflowContext,
    WorkflowContext,
)
from tests.helpers import eventually, scaled

ONCE = RetryPolicy(max_attempts=1)


def _workflow_threads(run_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"durably-workflow-{run_id}"]


async def test_a_sync_workflow_runs_every_kind_of_step_once_across_replays(db_url: str) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()

    def add(ctx: StepContext, a: int, b: int) -> int:
        ran[ctx.step] += 1
        return a + b

    async def shout(text: str) -> str:
        ran["shout"] += 1
        await asyncio.sleep(0)
        return text.upper()

    def insert(conn: Any, n: int) -> int:
        ran["tx"] += 1
        return n

    async def insert_async(conn: Any, n: int) -> int:
        ran["tx"] += 1
        return n

    @app.workflow(name="leaf", version="v1")
    def leaf(ctx: SyncWorkflowContext, n: int) -> int:
        return int(ctx.step.run("double", add, n, n))

    @app.workflow(name="flow", version="v1")
    def flow(ctx: SyncWorkflowContext, n: int) -> dict[str, Any]:
        total = ctx.step.run("add", add, n, 1)
        loud = ctx.step.run("shout", shout, "hi")
        ctx.step.sleep("nap", "50ms")  # parks: what follows runs after a full replay
        tx = ctx.step.transaction("tx", insert if db_url.startswith("sqlite") else insert_async,
                                  total)  # fmt: skip
        ctx.step.set_event("progress", {"at": "signal"})
        sig = ctx.step.wait_for_signal(f"go:{ctx.run_id}", timeout="1h")
        first = ctx.step.start_workflow(leaf, 1)
        second = ctx.step.start_workflow(leaf, 2)
        child = ctx.step.run_workflow(leaf, 3)
        patched = ctx.patched("p1")
        return {"total": total, "loud": loud, "tx": tx, "sig": sig, "patched": patched,
                "children": [first.result(), second.result(), child]}  # fmt: skip

    async with app, app.worker(concurrency=4):
        handle = await flow.start(5)
        assert await app.get_event(handle.run_id, "progress", timeout=scaled(20)) == {
            "at": "signal"}  # fmt: skip
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the signal wait")
        await app.send_signal(f"go:{handle.run_id}", {"ok": True})
        out = await handle.result(timeout=scaled(20))
        await eventually(lambda: not _workflow_threads(handle.run_id), what="threads to end")
    assert out == {"total": 6, "loud": "HI", "tx": 6, "sig": {"ok": True}, "patched": True,
                   "children": [2, 4, 6]}  # fmt: skip
    assert ran == {"add": 1, "shout": 1, "tx": 1, "double": 3}


async def _is(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


async def test_a_sync_workflow_replays_as_its_async_twin(db_url: str) -> None:
    """Same steps, same history: a workflow can move from `def` to `async def` (or back)
    while runs are in flight."""
    app = Durably(db_url)
    ran: list[int] = []

    def inc(n: int) -> int:
        ran.append(n)
        return n + 1

    @app.workflow(name="twin", version="v1")
    def sync_twin(ctx: SyncWorkflowContext, n: int) -> int:
        n = ctx.step.run("inc", inc, n)
        ctx.step.sleep("nap", "300ms")
        return ctx.step.run("inc-2", inc, n)

    async with app, app.worker():
        handle = await sync_twin.start(1)
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the nap")
    del app.workflows[("twin", "v1")]

    @app.workflow(name="twin", version="v1")
    async def async_twin(ctx: WorkflowContext, n: int) -> int:
        n = await ctx.step.run("inc", inc, n)
        await ctx.step.sleep("nap", "300ms")
        return await ctx.step.run("inc-2", inc, n)

    async with app, app.worker():
        assert await async_twin.handle(handle.run_id).result(timeout=scaled(20)) == 3
        steps = [(s.step, s.kind, s.status) for s in await app.list_steps(handle.run_id)]
    assert steps == [("inc", "function", "completed"), ("nap", "sleep", "completed"),
                     ("inc-2", "function", "completed")]  # fmt: skip
    assert ran == [1, 2]


async def test_sync_workflow_errors_and_misuse(db_url: str) -> None:
    app = Durably(db_url)

    def boom() -> None:
        raise ValueError("boom")

    @app.workflow(name="catches", version="v1")
    def catches(ctx: SyncWorkflowContext) -> str:
        try:
            ctx.step.run("boom", boom, retry=ONCE)
        except StepFailedError as exc:
            return f"caught {exc.error['type']}"
        return "not caught"

    @app.workflow(name="raises", version="v1")
    def raises(ctx: SyncWorkflowContext) -> None:
        raise RuntimeError("workflow code failed")

    @app.workflow(name="gathers", version="v1")
    def gathers(ctx: SyncWorkflowContext) -> None:
        with contextlib.suppress(Exception):  # refused, and the run fails all the same
            ctx.gather()

    @app.workflow(name="nested", version="v1")
    def nested(ctx: SyncWorkflowContext) -> None:
        ctx.step.run("outer", lambda: ctx.step.run("inner", boom), retry=ONCE)

    @app.workflow(name="awaitable", version="v1")
    def awaitable(ctx: SyncWorkflowContext) -> Any:
        return asyncio.sleep(0)

    async with app, app.worker():
        runs = {}
        for wf in (catches, raises, gathers, nested, awaitable):
            handle: Any = await wf.start()
            runs[wf.name] = await handle.wait(timeout=scaled(20))
    assert runs["catches"].status == "completed" and runs["catches"].output == "caught ValueError"
    assert runs["raises"].status == "failed"
    assert runs["raises"].error["message"] == "workflow code failed"
    assert runs["gathers"].status == "failed"
    assert "its steps run one at a time" in runs["gathers"].error["message"]
    assert runs["nested"].status == "failed"
    assert "outside the sync workflow's own thread" in runs["nested"].error["message"]
    assert runs["awaitable"].status == "failed"
    assert "declare it `async def`" in runs["awaitable"].error["message"]


def test_generators_are_refused_at_decoration() -> None:
    app = Durably("sqlite:///:memory:")
    with pytest.raises(TypeError, match="plain `def`"):

        @app.workflow(name="gen", version="v1")
        def gen(ctx: SyncWorkflowContext) -> Any:
            yield 1


async def test_cancel_stops_a_sync_workflow_in_a_running_step(db_url: str) -> None:
    app = Durably(db_url)
    started = threading.Event()
    seen: list[str] = []

    def long(ctx: StepContext) -> None:
        started.set()
        if ctx.cancelled.wait(scaled(30)):
            seen.append("cancelled")

    def after() -> None:
        seen.append("after")

    @app.workflow(name="slow", version="v1")
    def slow(ctx: SyncWorkflowContext) -> None:
        try:
            ctx.step.run("long", long)
            ctx.step.run("after", after)
        finally:
            seen.append("unwound")

    async with app, app.worker():
        handle = await slow.start()
        await eventually(started.is_set, what="the long step")
        await app.cancel(handle.run_id)
        run = await handle.wait(timeout=scaled(5))
        await eventually(lambda: not _workflow_threads(handle.run_id), what="the thread to end")
        steps = [(s.step, s.status) for s in await app.list_steps(handle.run_id)]
    assert run.status == "canceled"
    assert steps == [("long", "canceled")]
    assert seen == ["cancelled", "unwound"]


async def test_sync_workflow_code_that_blocks_is_reported_where_it_is(
    db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's loop waits for sync workflow code between two steps (as for async
    # code between two awaits); code that blocks there is named, not the loop's wait.
    from durably.workflow import syncflow as _syncflow

    monkeypatch.setattr(_syncflow, "BLOCKED_S", 0.05)
    app = Durably(db_url)
    release = threading.Event()

    def one() -> int:
        return 1

    @app.workflow(name="blocking", version="v1")
    def blocking(ctx: SyncWorkflowContext) -> int:
        first = ctx.step.run("one", one)
        release.wait(scaled(10))  # workflow code that blocks (it should be a step)
        return first

    seen: list[bool] = []

    def release_once_reported() -> None:
        # A thread of its own: the loop this test runs on is the one being blocked.
        deadline = time.monotonic() + scaled(10)
        while time.monotonic() < deadline and not seen:
            seen.extend(True for r in caplog.records if "release.wait" in r.getMessage())
            time.sleep(0.01)
        release.set()

    async with app, app.worker():
        handle = await blocking.start()
        watcher = threading.Thread(target=release_once_reported)
        watcher.start()
        assert await handle.result(timeout=scaled(10)) == 1
        watcher.join()
    assert seen, "the blocked workflow code was not reported"
