"""A step never awaited is refused at the call (SPEC §4.14), on both backends: the run fails
naming the step before any later step runs, the same way live and on replay; awaitables
kept and awaited later, gathered, wrapped in tasks, and children left alone on purpose
(§4.15) go on working."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from durably import Durably, WorkflowContext, WorkflowMisuseError
from durably.testing import replay
from tests.helpers import scaled


async def test_a_step_never_awaited_fails_the_run_before_any_later_step_runs(
    db_url: str,
) -> None:
    app = Durably(db_url)
    ran: list[str] = []

    def body(what: str) -> str:
        ran.append(what)
        return what

    def undo(value: str) -> None:
        ran.append(f"undo:{value}")

    @app.workflow(name="forgot", version="v1")
    async def forgot(ctx: WorkflowContext) -> str:
        await ctx.step.run("first", body, "first", compensate=undo)
        await ctx.step.sleep("nap", "10ms")  # what follows runs in a claim that replays
        ctx.step.run("reserve", body, "reserve", compensate=undo)
        await ctx.step.run("charge", body, "charge", compensate=undo)
        await ctx.step.run("ship", body, "ship")
        return "shipped"

    @app.workflow(name="forgot-forever", version="v1")
    async def forever(ctx: WorkflowContext) -> None:
        ctx.step.run("reserve", body, "reserve-2")
        await ctx.step.wait_for_signal("never")  # would wait for ever, never told

    async with app, app.worker():
        runs = [await (await wf.start()).wait(timeout=scaled(20)) for wf in (forgot, forever)]
        attempts = await app.list_steps(runs[0].run_id)
    steps = [(s.step, s.status) for s in attempts]
    history = {"run": runs[0].to_dict(), "steps": [s.to_dict() for s in attempts]}
    for run, position in zip(runs, (3, 1), strict=True):
        assert run.status == "failed" and run.attempts == 1, run.error
        assert run.error is not None and run.error["type"] == "WorkflowMisuseError"
        assert run.error["message"] == (
            f"step 'reserve' at position {position} was never awaited: did you forget await?"
        )
    assert ran == ["first", "undo:first"]  # neither reserve nor any later step ran
    assert steps == [("first", "completed"), ("nap", "completed"),
                     ("compensate:first", "completed")]  # fmt: skip
    # The replay tester finds the same mistake at the same place.
    with pytest.raises(WorkflowMisuseError, match="'reserve' at position 3 was never awaited"):
        replay(app, json.loads(json.dumps(history, default=str)))


async def test_awaitables_kept_gathered_or_in_tasks_and_children_left_alone_still_work(
    db_url: str,
) -> None:
    app = Durably(db_url)

    async def body(what: str) -> str:
        await asyncio.sleep(0)
        return what

    @app.workflow(name="kid", version="v1")
    async def kid(ctx: WorkflowContext, what: str) -> str:
        return await ctx.step.run("kid", body, what)

    @app.workflow(name="legit", version="v1")
    async def legit(ctx: WorkflowContext) -> list[Any]:
        a, b = ctx.step.run("a", body, "a"), ctx.step.run("b", body, "b")
        out: list[Any] = [await a, await b]
        await ctx.step.sleep("nap", "10ms")  # all that follows replays once
        out += await asyncio.gather(ctx.step.run("c", body, "c"), ctx.step.run("d", body, "d"))
        out += await ctx.gather(ctx.step.run("e", body, "e"), ctx.step.run("f", body, "f"))
        task = asyncio.ensure_future(ctx.step.run("g", body, "g"))

        async def branch() -> str:
            return await ctx.step.run("h", body, "h")

        made = asyncio.get_running_loop().create_task(branch())
        ctx.step.start_workflow(kid, "alone", name="left-alone")  # legitimate (§4.15)
        kept = ctx.step.start_workflow(kid, "kept", name="kept")
        await ctx.step.sleep("nap-2", "10ms")
        out += [await task, await made, await kept]
        out.append(await ctx.wait_first(ctx.step.run("i", body, "i"), ctx.step.sleep("z", "1h")))
        return out

    async with app, app.worker():
        run = await (await legit.start()).wait(timeout=scaled(20))
    assert run.status == "completed", run.error
    assert run.output == ["a", "b", "c", "d", "e", "f", "g", "h", "kept", [0, "i"]]


async def test_a_step_dropped_by_an_error_or_a_cancellation_is_no_forgotten_await(
    db_url: str,
) -> None:
    """A step issued as a gather is built, dropped because building it failed, leaves the
    user's error to fail the run (by its policy); a `wait_first` loser cancelled while it
    holds an issued step it would await later fails nothing."""
    app = Durably(db_url)

    def body(what: str) -> str:
        return what

    def bad() -> str:
        raise ValueError("no argument for b")

    @app.workflow(name="builds", version="v1")
    async def builds(ctx: WorkflowContext) -> tuple[str, str]:
        return await ctx.gather(ctx.step.run("a", body, "a"), ctx.step.run("b", body, bad()))

    @app.workflow(name="races", version="v1")
    async def races(ctx: WorkflowContext) -> Any:
        async def slow() -> str:
            later = ctx.step.run("later", body, "later")
            await ctx.step.sleep("long", "1h")
            return await later

        first = await ctx.wait_first(ctx.step.run("quick", body, "quick"), slow())
        return [first, await ctx.step.run("after", body, "after")]

    async with app, app.worker():
        built = await (await builds.start()).wait(timeout=scaled(20))
        raced = await (await races.start()).wait(timeout=scaled(20))
    assert built.status == "failed", built.error
    assert built.error is not None and built.error["type"] == "ValueError", built.error
    assert raced.status == "completed", raced.error
    assert raced.output == [[0, "quick"], "after"]
