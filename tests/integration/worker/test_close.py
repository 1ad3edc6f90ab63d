"""A worker's end is deterministic: when it returns (and `Durably.close()` after it), no
task it started is left running, even when a step body ignores cancellation; the wait for
such a body is bounded and logged."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import pytest

from durably import Durably
from durably.execution import lifecycles as _lifecycles
from tests.helpers import eventually, scaled


def _engine_tasks() -> list[asyncio.Task[Any]]:
    """Tasks of the engine still running (the stubborn step body itself is user code)."""
    found = []
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        name = getattr(coro, "__qualname__", "")
        if not task.done() and name.startswith(
            ("Execution.", "CommandTasks.", "LiveWaits.", "StepRecorder.", "Worker.")
        ):
            found.append(task)
    return found


async def test_close_while_a_body_ignores_cancellation(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_lifecycles, "SETTLE_S", 0.3)
    app = Durably(sqlite_url)
    started = asyncio.Event()
    release = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        while not release.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue  # a body that swallows every cancel
        return "done"

    @app.workflow(name="stubborn")
    async def wf(ctx: Any) -> str:
        result: str = await ctx.step.run("stubborn", stubborn)
        return result

    caplog.set_level(logging.WARNING, logger="durably.worker")
    try:
        async with app:
            async with app.worker(shutdown_grace="0.1s"):
                await wf.start()
                await eventually(started.is_set, what="the body to start")
                began = time.monotonic()
            assert time.monotonic() - began < scaled(5)  # bounded
            assert _engine_tasks() == []
        assert "ignored" in caplog.text and "stubborn" in caplog.text
    finally:
        release.set()  # the body may end now (else the event loop's end would wait for it)
        await asyncio.sleep(0.1)


async def test_close_stops_a_worker_still_running_with_a_bounded_drain(db_url: str) -> None:
    """`Durably.close()` while `app.worker()` runs: the worker stops claiming, drains (a
    run that ends within `shutdown_grace` completes, one that does not is released at
    once, not left to its lease), and returns before the connections close."""
    app = Durably(db_url)
    started = asyncio.Event()
    never = asyncio.Event()

    async def quick() -> str:
        await asyncio.sleep(0.2)
        return "done"

    async def stuck() -> None:
        started.set()
        await never.wait()

    @app.workflow(name="quick")
    async def quick_wf(ctx: Any) -> str:
        result: str = await ctx.step.run("quick", quick)
        return result

    @app.workflow(name="stuck")
    async def stuck_wf(ctx: Any) -> None:
        await ctx.step.run("stuck", stuck)

    await app.open()
    worker = app.worker(shutdown_grace=f"{scaled(2):g}s", lease="60s")
    running = asyncio.create_task(worker.run(install_signals=False))
    a = await quick_wf.start()
    b = await stuck_wf.start()
    await eventually(started.is_set, what="the stuck body to start")
    began = time.monotonic()
    await app.close()
    assert time.monotonic() - began < scaled(10)  # bounded
    assert running.done() and running.exception() is None
    async with Durably(db_url) as other:
        done, left = await other.get_run(a.run_id), await other.get_run(b.run_id)
    assert done.status == "completed" and done.output == "done"
    assert left.status == "pending" and left.worker_id is None  # released: claimable now


async def test_close_after_a_worker_that_would_not_stop_raises_nothing(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by review: the first close() cancelled the worker's `ended` future when its
    # wait timed out, and every later close() raised CancelledError.
    import concurrent.futures

    class Stuck:  # a worker whose loop never gets to its end
        worker_id, stop_within = "stuck", 0.05
        ended: concurrent.futures.Future[None] = concurrent.futures.Future()

        def stop(self) -> None:
            pass

    app = Durably(db_url)
    await app.open()
    stuck = Stuck()
    app.workers_running.add(stuck)  # type: ignore[arg-type]
    await app.close()
    await app.close()
    assert not stuck.ended.cancelled()
    assert sum("did not stop" in r.getMessage() for r in caplog.records) == 2


async def test_an_execution_cancelled_from_outside_leaves_its_run_to_be_claimed_again(
    db_url: str,
) -> None:
    # Found by review: an execution task cancelled from outside (as the event loop's
    # shutdown cancels every task) took the cancel for a defect and failed the run.
    app = Durably(db_url)
    started = asyncio.Event()

    async def long() -> int:
        started.set()
        await asyncio.sleep(scaled(30))
        return 1

    @app.workflow(name="cut-short", version="v1")
    async def cut_short(ctx: Any) -> int:
        return int(await ctx.step.run("long", long))

    async with app:
        handle = await cut_short.start()
        worker = app.worker()
        async with worker:
            await asyncio.wait_for(started.wait(), scaled(10))
            _, task = worker.running[handle.run_id]
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        run = await app.get_run(handle.run_id)
    assert run.status in ("running", "pending"), run
