"""What wakes a parked parent, and what its child's end means to it (issue 31 item 14,
from OpenWorkflow's suite): a child's end wakes its parent only when the parent waits
for that child; a child that ends after its parent's wait for it timed out, while no worker
served the parent, counts as timed out."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from durably import Durably, RetryPolicy, RunFailedError, WorkflowTimeoutError
from tests.helpers import duration, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


async def _on_signal(app: Durably, run_id: str) -> bool:
    """The run is parked on its signal, A's end recorded."""
    steps = await app.list_steps(run_id)
    return (await _status(app, run_id, "waiting")) and [
        (s.step, s.status) for s in steps if s.kind != "child" or s.status == "completed"
    ] == [("a", "completed"), ("parent-go", "running")]


async def test_a_parked_parent_is_woken_only_by_a_child_it_waits_for(db_url: str) -> None:
    """The parent starts A and B, awaits A, then waits for a signal: B's end does not
    claim (and replay) the parent. It reads B's result once it awaits it. Each claim of a
    run raises its fence by one: the parent's counts its claims."""
    app = Durably(db_url)

    @app.workflow(name="kid", version="v1", retry=ONCE)
    async def kid(ctx: Any, name: str) -> str:
        if name == "b":
            await ctx.step.wait_for_signal("b-go", timeout=duration(60))
        return name

    @app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any) -> list[Any]:
        a = ctx.step.start_workflow(kid, "a", name="a")
        b = ctx.step.start_workflow(kid, "b", name="b")
        got = [await a]
        got.append(await ctx.step.wait_for_signal("parent-go", timeout=duration(60)))
        got.append(await b)
        return got

    async with app, app.worker():
        handle = await parent.start()
        await eventually(lambda: _on_signal(app, handle.run_id), what="the parent's wait")
        kids = {r.input: r for r in await app.list_runs(workflow="kid")}
        await eventually(lambda: _status(app, kids["b"].run_id, "waiting"), what="B to wait")
        claims = (await app.get_run(handle.run_id)).fence
        await app.send_signal("b-go", None)
        assert await app.handle(kids["b"].run_id).result(timeout=scaled(10)) == "b"
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the parent")
        await app.send_signal("parent-go", "go")
        assert await handle.result(timeout=scaled(10)) == ["a", "go", "b"]
        # One claim for the signal, none for B's end.
        assert (await app.get_run(handle.run_id)).fence == claims + 1


async def test_a_child_ending_after_its_parents_wait_timed_out_counts_as_timed_out(
    db_url: str,
) -> None:
    """The parent waits for its child with a timeout; its worker stops. The timeout passes
    while no worker serves the parent, and the child then completes (its own worker).
    Its end finds the parent's wait timed out: it is canceled (its compensation runs), as the parent would have canceled it on time; and when the parent is served again
    it reads a time-out (WorkflowTimeoutError), not the child's late result."""
    parent_app, kid_app = Durably(db_url), Durably(db_url)
    refunds: list[str] = []

    async def kid_flow(ctx: Any) -> str:
        await ctx.step.run("charge", lambda: "charged", compensate=lambda: refunds.append("x"))
        await ctx.step.wait_for_signal("kid-go", timeout=duration(60))
        return "late"

    kid = parent_app.workflow(name="kid", version="v1", retry=ONCE)(kid_flow)
    kid_app.workflow(name="kid", version="v1", retry=ONCE)(kid_flow)

    @parent_app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any) -> str:
        try:
            return str(await ctx.step.run_workflow(kid, timeout=duration(1)))
        except WorkflowTimeoutError:
            return "timed out"

    async with parent_app, kid_app:
        async with kid_app.worker():
            async with parent_app.worker():
                handle = await parent.start()
                await eventually(lambda: _status(parent_app, handle.run_id, "waiting"),
                                 what="the parent to wait")  # fmt: skip
            [child] = await parent_app.list_runs(workflow="kid")
            await eventually(lambda: _status(parent_app, child.run_id, "waiting"),
                             what="the child to wait")  # fmt: skip
            wake_at = (await parent_app.get_run(handle.run_id)).available_at
            assert wake_at is not None

            await eventually(lambda: datetime.now(UTC) > wake_at, what="the timeout to pass")
            await kid_app.send_signal("kid-go", None)
            with pytest.raises(RunFailedError, match="parent stopped waiting"):
                await kid_app.handle(child.run_id).result(timeout=scaled(10))  # not "late"
        async with parent_app.worker():
            assert await handle.result(timeout=scaled(10)) == "timed out"
    assert refunds == ["x"]
