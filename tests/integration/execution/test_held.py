"""A deploy mistake is held, not failed (SPEC §4.2, issue 31 item 2), on both backends: a
run whose replay does not match its history waits for matching code with no compensation,
no attempt spent and its children left alone; it goes on by itself once the fix is
deployed; `cancel` still ends it, and its undos then run under matching code."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durably import Durably, NonDeterminismError, RetryPolicy, WorkflowTimeoutError
from tests.helpers import eventually, scaled

NO_RETRY = RetryPolicy(max_attempts=1)


def _order(app: Durably, first: str, undone: list[str], ran: list[str]) -> Any:
    """The order workflow as deployed: `first` names its first step (a rename is the
    deploy mistake)."""

    async def reserve() -> str:
        ran.append("reserve")
        return "stock-1"

    async def release(stock: str) -> None:
        undone.append(stock)

    async def ship(approval: Any) -> str:
        ran.append("ship")
        return f"shipped:{approval['ok']}"

    async def child(ctx: Any) -> str:
        await ctx.step.wait_for_signal("child-go")
        return "child done"

    kid_wf = app.workflow(name="held-child", version="v1")(child)

    @app.workflow(name="held-order", version="v1", retry=NO_RETRY)
    async def order(ctx: Any) -> Any:
        stock = await ctx.step.run(first, reserve, compensate=release)
        kid = ctx.step.start_workflow(kid_wf)
        approval = await ctx.step.wait_for_signal("approve")
        shipped = await ctx.step.run("ship", ship, approval)
        return {"stock": stock, "shipped": shipped, "child": await kid}

    return order


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


async def _deployed_v1(db_url: str, deadline_at: datetime | None = None) -> tuple[str, list[str]]:
    """A run of the original code, waiting for its approval, no worker left running."""
    app, ran = Durably(db_url), list[str]()
    order = _order(app, "reserve-stock", [], ran)
    async with app, app.worker():
        handle = await order.start(deadline_at=deadline_at)
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the wait")
    return handle.run_id, ran


async def test_a_replay_mismatch_holds_the_run_until_the_fix_continues_it(db_url: str) -> None:
    run_id, _ = await _deployed_v1(db_url)
    bad, undone, ran = Durably(db_url), list[str](), list[str]()
    _order(bad, "reserve-stock-v2", undone, ran)
    async with bad:
        before = await bad.get_run(run_id)
        # Sent while the changed code is deployed: kept for the run, never lost.
        sent = await bad.send_signal("approve", {"ok": True})
        assert sent["delivered_to"] == [run_id]
        steps_before = await bad.list_steps(run_id)
        child_id = next(s for s in steps_before if s.kind == "child").child_run_id
        assert child_id is not None
        async with bad.worker():
            await eventually(lambda: _status(bad, run_id, "held"), what="the run held")
            held = await bad.get_run(run_id)
            assert [r.run_id for r in await bad.list_stuck()] == [run_id]
            assert [r.run_id for r in await bad.list_runs(status="held")] == [run_id]
        assert held.error is not None and held.error["type"] == "NonDeterminismError"
        message = held.error["message"]
        assert "position 1" in message and "'reserve-stock'" in message
        assert "'reserve-stock-v2'" in message and "ctx.patched()" in message
        assert (held.error["position"], held.error["holds"]) == (1, 1)
        assert "'reserve-stock'" in held.error["expected"]
        assert (held.attempts, held.finished_at) == (before.attempts, None)
        assert held.available_at is not None and held.worker_id is None
        assert undone == [] and ran == []  # no compensation, no step of the changed code
        assert await bad.list_steps(run_id) == steps_before  # no attempt was spent
        assert (await bad.get_run(child_id)).status == "waiting"  # its child goes on

    fixed, undone, ran = Durably(db_url), list[str](), list[str]()
    _order(fixed, "reserve-stock", undone, ran)
    async with fixed, fixed.worker():
        await fixed.send_signal("child-go", None)
        done = await fixed.handle(run_id).wait(timeout=scaled(30))
        assert done.status == "completed", done.error
        assert done.output["shipped"] == "shipped:True"  # the signal sent while held
        assert done.output["child"] == "child done"
        assert (done.attempts, ran, undone) == (before.attempts, ["ship"], [])


async def test_the_same_bad_code_holds_it_again_with_a_growing_back_off(db_url: str) -> None:
    run_id, _ = await _deployed_v1(db_url)
    bad, undone, ran = Durably(db_url), list[str](), list[str]()
    _order(bad, "renamed", undone, ran)
    async with bad:
        await bad.send_signal("approve", {"ok": True})
        async with bad.worker():
            await eventually(lambda: _status(bad, run_id, "held"), what="the first hold")
            first = await bad.get_run(run_id)
            # The first back-off is short: the same code claims it again and holds it again.
            await eventually(
                lambda: _fence_past(bad, run_id, first.fence), timeout=scaled(15),
                what="a second hold",
            )  # fmt: skip
            await eventually(lambda: _status(bad, run_id, "held"), what="held again")
            second = await bad.get_run(run_id)
        assert second.attempts == first.attempts and undone == [] and ran == []
        assert first.error is not None and second.error is not None
        assert (first.error["holds"], second.error["holds"]) == (1, 2)
        assert 0 < first.error["retry_in_s"] < second.error["retry_in_s"]


async def _fence_past(app: Durably, run_id: str, fence: int) -> bool:
    return (await app.get_run(run_id)).fence > fence


async def test_cancel_ends_a_held_run_and_its_undos_wait_for_matching_code(db_url: str) -> None:
    run_id, _ = await _deployed_v1(db_url)
    bad, undone, ran = Durably(db_url), list[str](), list[str]()
    _order(bad, "renamed", undone, ran)
    async with bad:
        async with bad.worker():
            await bad.send_signal("approve", {"ok": True})
            await eventually(lambda: _status(bad, run_id, "held"), what="the run held")
        canceled = await bad.cancel(run_id)
        assert canceled.status == "canceled"
        async with bad.worker():
            # The changed code cannot say which undo belongs to which step: it runs none.
            await eventually(lambda: _fence_past(bad, run_id, canceled.fence),
                             what="a claim of the changed code")  # fmt: skip
        assert undone == [] and not (await bad.get_run(run_id)).done

    fixed, undone, ran = Durably(db_url), list[str](), list[str]()
    _order(fixed, "reserve-stock", undone, ran)
    async with fixed, fixed.worker():
        run = await fixed.handle(run_id).wait(timeout=scaled(30))
        assert run.status == "canceled" and undone == ["stock-1"] and ran == []
        steps = await fixed.list_steps(run_id)
        child = next(s for s in steps if s.kind == "child").child_run_id
        assert child is not None
        await eventually(lambda: _status(fixed, child, "canceled"), what="the child canceled")


async def test_a_held_run_cannot_be_resumed_and_is_counted(db_url: str) -> None:
    run_id, _ = await _deployed_v1(db_url)
    bad = Durably(db_url)
    _order(bad, "renamed", [], [])
    async with bad:
        async with bad.worker():
            await bad.send_signal("approve", {"ok": True})
            await eventually(lambda: _status(bad, run_id, "held"), what="the run held")
        with pytest.raises(Exception, match="held: only a failed or canceled run"):
            await bad.resume(run_id)
        with pytest.raises(Exception, match="held"):
            await bad.purge(older_than="0s", status=["held"])
        assert not (await bad.get_run(run_id)).terminal


async def test_a_non_determinism_error_raised_by_user_code_fails_as_any_error(
    db_url: str,
) -> None:
    """Only the engine's own replay check holds a run: the same error raised by a step
    body, or by workflow code, is the user's, and fails the run as any error does."""
    app, undone = Durably(db_url), []

    async def reserve() -> str:
        return "stock"

    async def release(stock: str) -> None:
        undone.append(stock)

    async def body() -> None:
        raise NonDeterminismError(1, "a", "b")

    @app.workflow(name="own-step", version="v1", retry=NO_RETRY)
    async def own_step(ctx: Any) -> None:
        await ctx.step.run("reserve", reserve, compensate=release)
        await ctx.step.run("raise", body, retry=RetryPolicy(max_attempts=1))

    @app.workflow(name="own-code", version="v1", retry=NO_RETRY)
    async def own_code(ctx: Any) -> None:
        await ctx.step.run("reserve", reserve, compensate=release)
        raise NonDeterminismError(2, "c", "d")

    async with app, app.worker():
        for wf in (own_step, own_code):
            run = await (await wf.start()).wait(timeout=scaled(20))
            assert run.status == "failed", run
    assert undone == ["stock", "stock"]


async def test_a_held_run_has_not_ended_its_result_keeps_waiting(db_url: str) -> None:
    """Waiting for a held run's result times out (never a RunFailedError), through holds in
    a row, and returns the output once the fix completes it."""
    run_id, _ = await _deployed_v1(db_url)
    bad = Durably(db_url)
    _order(bad, "renamed", [], [])
    async with bad:
        await bad.send_signal("approve", {"ok": True})
        handle = bad.handle(run_id)
        async with bad.worker():
            await eventually(lambda: _status(bad, run_id, "held"), what="the run held")
            first = await bad.get_run(run_id)
            waiter = asyncio.ensure_future(handle.result(timeout=scaled(60)))
            await eventually(lambda: _fence_past(bad, run_id, first.fence), what="a second claim")
            await eventually(lambda: _status(bad, run_id, "held"), what="held again")
            assert not waiter.done()
        with pytest.raises(WorkflowTimeoutError, match="still held"):
            await handle.result(timeout=scaled(0.5))
        assert not waiter.done()
        fixed = Durably(db_url)
        _order(fixed, "reserve-stock", [], [])
        async with fixed, fixed.worker():
            await fixed.send_signal("child-go", None)
            out = await waiter
    assert out["shipped"] == "shipped:True"


async def test_a_deadline_passed_while_held_fails_the_run_under_the_fix(db_url: str) -> None:
    """The deadline of a held run does not end it under code that cannot replay it (its
    claims keep their back-off, nothing is undone): the fix's claim fails it, undoing."""
    deadline = datetime.now(UTC) + timedelta(seconds=scaled(2))
    run_id, _ = await _deployed_v1(db_url, deadline_at=deadline)
    bad, undone, ran = Durably(db_url), list[str](), list[str]()
    _order(bad, "renamed", undone, ran)
    async with bad:
        await eventually(lambda: _past(bad, deadline), timeout=scaled(10), what="the deadline")
        async with bad.worker():
            await eventually(lambda: _status(bad, run_id, "held"), what="the run held")
            first = await bad.get_run(run_id)
            await eventually(lambda: _fence_past(bad, run_id, first.fence), what="a second claim")
            await eventually(lambda: _status(bad, run_id, "held"), what="held again")
            second = await bad.get_run(run_id)
        assert first.error is not None and second.error is not None
        assert (first.error["holds"], second.error["holds"]) == (1, 2)  # no claim in between
        assert second.available_at is not None and second.available_at > deadline
        assert undone == [] and ran == []

    fixed, undone, ran = Durably(db_url), list[str](), list[str]()
    _order(fixed, "reserve-stock", undone, ran)
    async with fixed, fixed.worker():
        run = await fixed.handle(run_id).wait(timeout=scaled(30))
    assert run.status == "failed" and run.error is not None, run
    assert run.error["type"] == "DeadlineExceeded" and undone == ["stock-1"] and ran == []


async def _past(app: Durably, when: datetime) -> bool:
    return datetime.now(UTC) > when
