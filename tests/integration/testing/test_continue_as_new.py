"""Continue-as-new in `durably.testing` (SPEC §4.23): a daily loop that continues as new,
tested with time skipping; `result()` follows the chain to its end. (The environment on
PostgreSQL takes a second or more of real time per skip, with or without a continue.)"""

from __future__ import annotations

import json

import pytest

from durably import Durably, NonDeterminismError, WorkflowContext
from durably.testing import Environment, replay

app = Durably()


@app.workflow(name="daily", version="v1")
async def daily(ctx: WorkflowContext, day: int) -> int:
    await ctx.step.sleep("night", "1 day")
    done = await ctx.step.run("work", lambda: day + 1)
    if done < 3:
        ctx.continue_as_new(done)
    return done


async def test_three_days_skipped(db_url: str) -> None:
    database = "sqlite" if db_url.startswith("sqlite") else db_url
    async with Environment(app, database, auto_skip=True):
        handle = await daily.start(0)
        assert await handle.result(timeout="2m") == 3
        runs = await app.list_runs(workflow="daily")
        assert sorted(r.status for r in runs) == ["completed"] + ["continued"] * 2


async def test_replay_of_a_run_that_continued(sqlite_url: str) -> None:
    """A continued run's exported history replays against the same code (its end is the
    continue, not a return), and a step added before the continue is a change."""
    async with Environment(app, "sqlite", auto_skip=True):
        handle = await daily.start(0)
        assert await handle.result(timeout="2m") == 3
        run = await app.get_run(handle.run_id)
        steps = await app.list_steps(handle.run_id)
    doc = json.loads(json.dumps({"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}))
    report = replay(app, doc)
    assert report.finished and report.output is None and not report.output_changed
    changed = Durably()

    @changed.workflow(name="daily", version="v1")
    async def daily2(ctx: WorkflowContext, day: int) -> int:
        await ctx.step.sleep("night", "1 day")
        done: int = await ctx.step.run("work", lambda: day + 1)
        await ctx.step.run("extra", lambda: 0)
        ctx.continue_as_new(done)

    with pytest.raises(NonDeterminismError):
        replay(changed, doc)
