"""Streams (§4.21) in durably.testing: written across skipped time, followed by a reader
in the test, the exported history replayed by `durably.testing.replay`."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from durably import Durably, WorkflowContext
from durably.testing import Environment, replay


def build() -> Durably:
    app = Durably()

    @app.workflow(name="weekly", version="v1")
    async def weekly(ctx: WorkflowContext, weeks: int) -> int:
        for week in range(weeks):
            await ctx.step.write_stream("report", {"week": week})
            await ctx.step.sleep(f"week-{week}", "7 days")
        await ctx.step.close_stream("report")
        return weeks

    return app


async def test_a_stream_written_across_skipped_time(db_url: str) -> None:
    app = build()
    database = "sqlite" if db_url.startswith("sqlite") else db_url
    async with Environment(app, database=database, auto_skip=True) as env:
        start = env.now()
        handle = await app.get_workflow("weekly").start(3)
        reader = asyncio.create_task(_read(app, handle.run_id))
        assert await handle.result(timeout="60s") == 3
        assert await asyncio.wait_for(reader, 60) == [{"week": w} for w in range(3)]
        assert env.now() - start >= timedelta(days=21)
        run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
    history = json.loads(json.dumps({"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}))
    assert [s["kind"] for s in history["steps"]].count("stream") == 4  # 3 writes, a close
    report = replay(build(), history)
    assert report.finished and report.output == 3 and not report.output_changed


async def _read(app: Durably, run_id: str) -> list[Any]:
    return [value async for value in app.read_stream(run_id, "report")]
