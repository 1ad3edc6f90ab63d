"""What wakes a parked parent (issue 31 item 14, from OpenWorkflow's suite): a child's end
(or cancel) wakes its parent only when the parent waits for that child; the end of a child
it started and does not await yet is read by the claim that reaches its await, never lost.
Each claim of a run raises its fence by one: a parent's fence counts its claims."""

from __future__ import annotations

import functools
import sqlite3
from typing import Any

import psycopg
import pytest

from durably import ChildWorkflowError, Durably, RetryPolicy
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


def _kid(app: Durably) -> Any:
    """A child that returns its name once `<name>-go` is sent."""

    @app.workflow(name="kid", version="v1", retry=ONCE)
    async def kid(ctx: Any, name: str) -> str:
        await ctx.step.wait_for_signal(f"{name}-go", timeout=duration(60))
        return name

    return kid


async def _kids(app: Durably, *names: str) -> dict[str, str]:
    """The kids' run ids by name, once each waits for its signal."""
    kids: dict[str, str] = await eventually(lambda: _listed(app, len(names)), what="the kids")
    for run_id in kids.values():
        await eventually(functools.partial(_status, app, run_id, "waiting"), what="a kid")
    return kids


async def _listed(app: Durably, count: int) -> dict[str, str] | None:
    kids = {r.input: r.run_id for r in await app.list_runs(workflow="kid")}
    return kids if len(kids) == count else None


async def _parked(app: Durably, run_id: str, fence: int) -> bool:
    run = await app.get_run(run_id)
    return run.status == "waiting" and run.fence == fence


async def test_a_parked_parent_is_woken_only_by_a_child_it_waits_for(db_url: str) -> None:
    """The parent starts A and B, awaits A, then waits for a signal: B's end does not
    claim (and replay) the parent. It reads B's result once it awaits it."""
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


async def test_a_child_that_ended_as_its_parent_ran_is_read_when_awaited(db_url: str) -> None:
    """B ends while its parent's claim runs a step, after that claim saw B still going and
    before the parent awaits B and parks on it: the parent reads B's end, it is not left
    parked for a child that ended."""
    app = Durably(db_url)
    kid = _kid(app)

    async def until_b_ended() -> None:
        b = (await _kids(app, "b"))["b"]  # started beside this step: maybe not yet
        await app.send_signal("b-go", None)
        await eventually(lambda: _status(app, b, "completed"), what="B's end")

    @app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any) -> str:
        b = ctx.step.start_workflow(kid, "b", name="b")
        await ctx.step.run("hold", until_b_ended)
        return str(await b)

    async with app, app.worker():
        handle = await parent.start()
        assert await handle.result(timeout=scaled(10)) == "b"


@pytest.mark.parametrize("how", ["gather", "wait_first"])
async def test_a_parent_awaiting_several_children_is_woken_by_each(db_url: str, how: str) -> None:
    """A parent awaiting B and C (gather, wait_first) is woken by whichever ends first.
    After wait_first, the loser's end no longer wakes it: it waits for a signal only."""
    app = Durably(db_url)
    kid = _kid(app)

    @app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any) -> list[Any]:
        b = ctx.step.start_workflow(kid, "b", name="b")
        c = ctx.step.start_workflow(kid, "c", name="c")
        if how == "gather":
            return list(await ctx.gather(b, c))
        first = list(await ctx.wait_first(b, c))
        return [*first, await ctx.step.wait_for_signal("parent-go", timeout=duration(60))]

    async with app, app.worker():
        handle = await parent.start()
        kids = await _kids(app, "b", "c")
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the parent")
        claims = (await app.get_run(handle.run_id)).fence
        await app.send_signal("c-go", None)
        await eventually(lambda: _parked(app, handle.run_id, claims + 1),
                         what="C's end to wake the parent")  # fmt: skip
        await app.send_signal("b-go", None)
        assert await app.handle(kids["b"]).result(timeout=scaled(10)) == "b"
        if how == "gather":
            assert await handle.result(timeout=scaled(10)) == ["b", "c"]
            assert (await app.get_run(handle.run_id)).fence == claims + 2
            return
        # B's end, had it woken the parent, did so in its own transaction.
        assert await _parked(app, handle.run_id, claims + 1)
        await app.send_signal("parent-go", "go")
        assert await handle.result(timeout=scaled(10)) == [1, "c", "go"]
        assert (await app.get_run(handle.run_id)).fence == claims + 2  # none for B's end


async def test_a_cancel_of_a_child_wakes_its_parent_only_if_it_waits_for_it(
    db_url: str,
) -> None:
    """C, started and not awaited, is canceled while the parent waits for a signal: the
    parent is not claimed, and reads the cancel once it awaits C. B, awaited, is canceled:
    the parent is woken."""
    app = Durably(db_url)
    kid = _kid(app)

    @app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any) -> list[str]:
        b = ctx.step.start_workflow(kid, "b", name="b")
        c = ctx.step.start_workflow(kid, "c", name="c")
        got = [await ctx.step.wait_for_signal("parent-go", timeout=duration(60))]
        for child in (c, b):
            try:
                got.append(await child)
            except ChildWorkflowError as exc:
                got.append(exc.status)
        return got

    async with app, app.worker():
        handle = await parent.start()
        kids = await _kids(app, "b", "c")
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the parent")
        claims = (await app.get_run(handle.run_id)).fence
        await app.cancel(kids["c"])
        assert await _parked(app, handle.run_id, claims)  # woken, it would be pending
        await app.send_signal("parent-go", "go")
        await eventually(lambda: _parked(app, handle.run_id, claims + 1), what="a wait for B")
        await app.cancel(kids["b"])
        assert await handle.result(timeout=scaled(10)) == ["go", "canceled", "canceled"]
        assert (await app.get_run(handle.run_id)).fence == claims + 2  # none for C's cancel


def _update_run(db_url: str, assignments: str, run_id: str) -> None:
    """What another release left in the run's row (from outside the engine)."""
    if db_url.startswith("sqlite"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            conn.execute(f"UPDATE durably_runs SET {assignments} WHERE id = ?", (run_id,))
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(f"UPDATE durably.runs SET {assignments} WHERE id = %s", (run_id,))


@pytest.mark.parametrize(
    "left",
    [
        # Parked before the migration that records what a parked run waits for.
        "parked_on = NULL, parked_fence = NULL",
        # Claimed (its fence raised) and parked again by a worker of the previous release,
        # which writes neither: what this release's park wrote is another claim's.
        "fence = fence + 1",
    ],
    ids=["before-migration", "previous-release"],
)
async def test_a_parent_parked_by_an_earlier_release_is_woken_by_any_child(
    db_url: str, left: str
) -> None:
    """Such a parent may wait for the child that ends: it is woken, as before."""
    app = Durably(db_url)
    kid = _kid(app)

    @app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any) -> list[str]:
        b = ctx.step.start_workflow(kid, "b", name="b")
        return [await ctx.step.wait_for_signal("parent-go", timeout=duration(60)), await b]

    async with app, app.worker():
        handle = await parent.start()
        kids = await _kids(app, "b")
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the parent")
        _update_run(db_url, left, handle.run_id)
        claims = (await app.get_run(handle.run_id)).fence
        await app.send_signal("b-go", None)
        assert await app.handle(kids["b"]).result(timeout=scaled(10)) == "b"
        await eventually(lambda: _parked(app, handle.run_id, claims + 1),
                         what="B's end to wake the parent")  # fmt: skip
        await app.send_signal("parent-go", "go")
        assert await handle.result(timeout=scaled(10)) == ["go", "b"]
