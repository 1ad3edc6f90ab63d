"""Children across the parent's attempts and at the edge of its timeout (issue 26): a
child's completion that races the parent's `run_workflow(timeout=)` is reported as
completed; a retry or a resume of the parent reuses the child at the same position (its
result, or the wait for it), never a second child doing the same work, but one of its
own where the earlier child's compensations undid that work (or for other input)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from durably import ChildWorkflowError, Durably, RetryPolicy, StepFailedError, WorkflowTimeoutError
from tests.helpers import duration, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)
TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")


async def test_a_child_completing_as_its_timeout_runs_out_is_reported_completed(
    db_url: str,
) -> None:
    """60 pairs, each child's work lasting about its parent's timeout: every parent's
    outcome agrees with its child's final status (a child that completed is its parent's
    result, a child the parent gave up on is canceled)."""
    app = Durably(db_url)
    timeout = scaled(0.3)

    async def work(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @app.workflow(name="child", version="v1", retry=ONCE)
    async def child(ctx: Any, seconds: float) -> str:
        done: str = await ctx.step.run("work", work, seconds)
        return done

    @app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any, seconds: float) -> dict[str, Any]:
        try:
            got = await ctx.step.run_workflow(child, seconds, timeout=f"{timeout}s")
        except WorkflowTimeoutError as exc:
            return {"outcome": "timed out", "error": str(exc)}
        except ChildWorkflowError as exc:
            return {"outcome": "failed", "error": str(exc)}
        return {"outcome": got}

    rng = random.Random(26)
    async with app, app.worker(concurrency=60):
        handles = [await parent.start(timeout * rng.uniform(0.8, 1.2)) for _ in range(60)]
        outcomes = [await h.result(timeout=scaled(60)) for h in handles]
        kids = {r.parent_run_id: r for r in await app.list_runs(workflow="child", limit=100)}
        disagree = []
        for h, got in zip(handles, outcomes, strict=True):
            kid = kids[h.run_id]
            expected = "done" if kid.status == "completed" else "timed out"
            if kid.status not in ("completed", "canceled") or got["outcome"] != expected:
                disagree.append((kid.run_id, kid.status, got))
    assert not disagree, f"{len(disagree)} of 60 parents disagree with their child: {disagree}"


async def _children_of(app: Durably, parent: str) -> list[Any]:
    runs = await app.list_runs(limit=100)
    return sorted((r for r in runs if r.parent_run_id == parent), key=lambda r: r.created_at)


async def test_a_retry_takes_the_completed_child_its_cut_dropped(db_url: str) -> None:
    """A caught failure, then a child that completed, then a failure: the retry's cut drops
    the child's result, and the call there takes it again from the same child (not run
    again)."""
    app = Durably(db_url)
    ran: list[str] = []

    def body(name: str) -> str:
        ran.append(name)
        if ran.count(name) == 1 and name != "double":
            raise RuntimeError(f"{name} is down")
        return name

    @app.workflow(name="kid", version="v1", retry=ONCE)
    async def kid(ctx: Any, n: int) -> int:
        await ctx.step.run("double", body, "double")
        return 2 * n

    @app.workflow(name="retried", version="v1", retry=TWICE)
    async def retried(ctx: Any) -> int:
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        got = await ctx.step.run_workflow(kid, 21)
        await ctx.step.run("charge", body, "charge", retry=ONCE)
        return int(got)

    async with app, app.worker():
        handle = await retried.start()
        assert await handle.result(timeout=scaled(20)) == 42
        assert (await handle.get()).attempts == 2
        assert len(await _children_of(app, handle.run_id)) == 1
        assert ran.count("double") == 1


async def test_a_retry_calling_with_other_input_replaces_the_earlier_child(db_url: str) -> None:
    app = Durably(db_url)
    calls: list[int] = []

    def fails_first() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first attempt fails")

    @app.workflow(name="waiter", version="v1", retry=ONCE)
    async def waiter(ctx: Any, n: int) -> int:
        await ctx.step.wait_for_signal(f"go:{n}", timeout=duration(30))
        return n

    @app.workflow(name="parent", version="v1", retry=TWICE)
    async def parent(ctx: Any) -> list[Any]:
        child = ctx.step.start_workflow(waiter, ctx.attempt)  # other input on the retry
        await ctx.step.run("fails-first", fails_first, retry=ONCE)
        return [await child, child.run_id]

    async with app, app.worker():
        handle = await parent.start()

        async def two_children() -> list[Any]:
            kids = await _children_of(app, handle.run_id)
            return kids if len(kids) == 2 and kids[1].status == "waiting" else []

        first, second = await eventually(two_children, what="the retry's own child")
        assert (await app.get_run(first.run_id)).status == "canceled"
        await app.send_signal("go:2", None)
        assert await handle.result(timeout=scaled(20)) == [2, second.run_id]


async def test_a_childs_timeout_may_be_an_instant(db_url: str) -> None:
    # OpenWorkflow's suite: run_workflow(..., timeout=) takes an absolute time too.
    app = Durably(db_url)
    release = asyncio.Event()

    @app.workflow(name="slow-child", version="v1")
    async def slow_child(ctx: Any) -> str:
        return await ctx.step.run("wait", release.wait) and "done"

    @app.workflow(name="deadline-parent", version="v1")
    async def parent(ctx: Any, until: str) -> str:
        try:
            timeout = datetime.fromisoformat(until)
            return str(await ctx.step.run_workflow(slow_child, timeout=timeout))
        except WorkflowTimeoutError:
            return "timed out"

    @app.workflow(name="naive-parent", version="v1")
    async def naive(ctx: Any) -> str:
        try:
            await ctx.step.run_workflow(slow_child, timeout=datetime(2030, 1, 1))
        except Exception as exc:
            return type(exc).__name__
        return "no error"

    async with app, app.worker(concurrency=4):
        until = datetime.now(UTC) + timedelta(seconds=scaled(1))
        handle = await parent.start(until.isoformat())
        assert await handle.result(timeout=scaled(10)) == "timed out"
        release.set()
        assert await (await naive.start()).result(timeout=scaled(10)) == "InvalidInput"


async def test_a_retry_starts_its_own_child_where_the_earlier_one_was_undone(db_url: str) -> None:
    """The child failed and its compensation refunded the charge: resumed, it would go on
    past the refund (the charge completed) and the order complete unpaid. The retry starts
    a child of its own, which charges again."""
    app = Durably(db_url)
    ledger: list[str] = []

    def charge() -> str:
        ledger.append("charge")
        return "c1"

    def refund(_: Any) -> None:
        ledger.append("refund")

    def confirm() -> str:
        ledger.append("confirm")
        if ledger.count("confirm") == 1:
            raise RuntimeError("confirm fails for good the first time")
        return "ok"

    @app.workflow(name="pay", version="v1")
    async def pay(ctx: Any) -> Any:
        await ctx.step.run("charge", charge, compensate=refund)
        return await ctx.step.run("confirm", confirm, retry=ONCE)

    @app.workflow(name="order", version="v1", retry=TWICE)
    async def order(ctx: Any) -> Any:
        return await ctx.step.run_workflow(pay, None)

    async with app, app.worker():
        handle = await order.start()
        assert await handle.result(timeout=scaled(20)) == "ok"
        kids = await _children_of(app, handle.run_id)
    assert ledger == ["charge", "confirm", "refund", "charge", "confirm"], ledger
    assert [k.status for k in kids] == ["failed", "completed"]


async def test_a_retry_waits_for_the_earlier_child_to_finish_its_compensations(
    db_url: str,
) -> None:
    """The child is canceled while it has a step to undo: the parent's attempt fails, and
    its retry finds the child still compensating. It waits for the undo to end, then starts
    a child of its own (not the canceled one's failure again)."""
    app = Durably(db_url)
    ledger: list[str] = []
    refunding, refund_go = asyncio.Event(), asyncio.Event()

    async def charge() -> str:
        ledger.append("charge")
        return "c1"

    async def refund(_: Any) -> None:
        refunding.set()
        await refund_go.wait()
        ledger.append("refund")

    @app.workflow(name="pay", version="v1")
    async def pay(ctx: Any) -> Any:
        await ctx.step.run("charge", charge, compensate=refund)
        return await ctx.step.wait_for_signal("go", timeout=duration(60))

    @app.workflow(name="order", version="v1", retry=TWICE)
    async def order(ctx: Any) -> Any:
        return await ctx.step.run_workflow(pay, None)

    async with app, app.worker():
        handle = await order.start()

        async def child_waiting() -> Any:
            kids = await _children_of(app, handle.run_id)
            return kids[-1] if kids and kids[-1].status == "waiting" else None

        first = await eventually(child_waiting, what="the child waiting for its signal")
        await app.cancel(first.run_id)
        await eventually(refunding.is_set, what="the child's compensation to run")
        await eventually(lambda: _attempts(app, handle.run_id, 2), what="the parent's retry")
        refund_go.set()
        second = await eventually(child_waiting, what="the retry's own child")
        await app.send_signal("go", "paid", run_id=second.run_id)
        assert await handle.result(timeout=scaled(20)) == "paid"
        kids = await _children_of(app, handle.run_id)
    assert ledger == ["charge", "refund", "charge"], ledger
    assert [k.status for k in kids] == ["canceled", "completed"]


async def _attempts(app: Durably, run_id: str, n: int) -> bool:
    return (await app.get_run(run_id)).attempts >= n


async def test_a_retry_calling_with_input_only_equal_in_python_replaces_the_child(
    db_url: str,
) -> None:
    """`True == 1` in Python, not in JSON: the retry's child of input `true` is not the
    earlier attempt's child of input `1` (a caught failure before the child: the retry's
    cut drops the child's result, and the call there looks for the child again)."""
    app = Durably(db_url)
    ran: list[str] = []

    def fails_first(name: str) -> None:
        ran.append(name)
        if ran.count(name) == 1:
            raise RuntimeError(f"{name} is down")

    @app.workflow(name="echo", version="v1")
    async def echo(ctx: Any, value: Any) -> Any:
        return value

    @app.workflow(name="parent", version="v1", retry=TWICE)
    async def parent(ctx: Any) -> Any:
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("reserve", fails_first, "reserve", retry=ONCE)
        got = await ctx.step.run_workflow(echo, 1 if ctx.attempt == 1 else True)
        await ctx.step.run("charge", fails_first, "charge", retry=ONCE)
        return got

    async with app, app.worker():
        handle = await parent.start()
        assert await handle.result(timeout=scaled(20)) is True
        assert len(await _children_of(app, handle.run_id)) == 2
