"""Continue-as-new in `durably.testing` (SPEC §4.23): a daily loop that continues as new,
tested with time skipping; `result()` follows the chain to its end. (The environment on
PostgreSQL takes a second or more of real time per skip, with or without a continue.)"""

from __future__ import annotations

from durably import Durably, WorkflowContext
from durably.testing import Environment

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
