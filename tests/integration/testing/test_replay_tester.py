"""durably.testing.replay: a stored history checked against changed code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durably import Durably, NonDeterminismError, SyncWorkflowContext, WorkflowContext
from durably.testing import Environment, replay


def double(x: int) -> int:
    return 2 * x


def build(change: str = "") -> Durably:
    app = Durably()

    @app.workflow(name="order", version="v1")
    async def order(ctx: WorkflowContext, n: int) -> dict[str, Any]:
        a = await ctx.step.run("a", double, n)
        if change == "rename":
            b, c = await ctx.gather(ctx.step.run("b2", double, a), ctx.step.run("c", double, 1))
        elif change == "drop":
            b, c = 0, await ctx.step.run("c", double, 1)
        else:
            b, c = await ctx.gather(ctx.step.run("b", double, a), ctx.step.run("c", double, 1))
        await ctx.step.sleep("nap", "1 day")
        if change == "extra":
            await ctx.step.run("d", double, 3)
        return {"total": a + b + c + (1 if change == "output" else 0)}

    return app


async def export(db_url: str) -> dict[str, Any]:
    """Run the workflow to its end and export it as `durably show --json` does."""
    app = build()
    database = "sqlite" if db_url.startswith("sqlite") else db_url
    async with Environment(app, database=database, auto_skip=True):
        handle = await app.get_workflow("order").start(5)
        assert await handle.result(timeout="20s") == {"total": 32}
        run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
    doc: dict[str, Any] = json.loads(
        json.dumps({"run": run.to_dict(), "steps": [s.to_dict() for s in steps]})
    )
    return doc


async def test_replay_accepts_the_same_code_and_refuses_changes(db_url: str) -> None:
    history = await export(db_url)
    report = replay(build(), json.dumps(history))
    assert report.finished and report.output == {"total": 32} and not report.output_changed
    assert report.results_replayed == 4  # a, b, c and the sleep
    assert replay(build("output"), history).output_changed

    with pytest.raises(NonDeterminismError, match=r"position 2: history has function step 'b'"
                       r".* calls function step 'b2'"):  # fmt: skip
        replay(build("rename"), history)
    with pytest.raises(NonDeterminismError, match=r"position 2.*'b'.*function step 'c'"):
        replay(build("drop"), history)
    with pytest.raises(NonDeterminismError, match=r"end of the run's history.*'d'"):
        replay(build("extra"), history)


async def test_replay_of_a_run_in_progress_checks_what_is_recorded(sqlite_url: str) -> None:
    app = build()
    async with Environment(app) as env:
        handle = await app.get_workflow("order").start(5)
        await env.wait_until_idle()  # asleep for a day
        run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
    history = json.loads(json.dumps({"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}))
    report = replay(build("extra"), history)  # a step after the sleep is a fine change
    assert not report.finished and report.results_replayed == 3
    with pytest.raises(NonDeterminismError):
        replay(build("rename"), history)


def build_sync(change: str = "") -> Durably:
    app = Durably()

    @app.workflow(name="order", version="v1")
    def order(ctx: SyncWorkflowContext, n: int) -> dict[str, Any]:
        a = ctx.step.run("a", double, n)
        b = ctx.step.run("b2" if change == "rename" else "b", double, a)
        ctx.step.sleep("nap", "1 day")
        return {"total": a + b}

    return app


async def test_replay_of_a_sync_workflow(sqlite_url: str) -> None:
    app = build_sync()
    async with Environment(app, auto_skip=True):
        handle = await app.get_workflow("order").start(5)
        assert await handle.result(timeout="20s") == {"total": 30}
        run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
    history = json.loads(json.dumps({"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}))
    report = replay(build_sync(), history)
    assert report.finished and report.output == {"total": 30} and report.results_replayed == 3
    with pytest.raises(NonDeterminismError, match=r"position 2: history has function step 'b'"):
        replay(build_sync("rename"), history)


async def test_replay_of_a_workflow_that_sets_an_event(sqlite_url: str) -> None:
    app = Durably()

    @app.workflow(name="publish", version="v1")
    async def publish(ctx: WorkflowContext, n: int) -> int:
        await ctx.step.set_event("progress", {"done": n})
        return await ctx.step.run("a", double, n)

    async with Environment(app, auto_skip=True):
        handle = await publish.start(4)
        assert await handle.result(timeout="20s") == 8
        run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
    report = replay(app, {"run": run.to_dict(), "steps": [s.to_dict() for s in steps]})
    assert report.finished and report.output == 8 and report.results_replayed == 2
