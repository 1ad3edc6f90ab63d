"""Search attributes in `durably.testing` (SPEC §4.24): set by a workflow in the testing
environment (time skipped), and a history holding them replayed by `replay`, which writes
nothing and checks the step by position, name and kind as any other."""

from __future__ import annotations

import json

import pytest

from durably import Durably, NonDeterminismError, SyncWorkflowContext, WorkflowContext
from durably.testing import Environment, replay


def build(change: str = "", sync: bool = False) -> Durably:
    app = Durably()

    if sync:

        @app.workflow(name="order", version="v1")
        def order_sync(ctx: SyncWorkflowContext, n: int) -> int:
            ctx.step.set_attributes({"stage": "paid", "n": n})
            ctx.step.sleep("nap", "1 day")
            ctx.step.set_attributes({"stage": "done"})
            return n

        return app

    @app.workflow(name="order", version="v1")
    async def order(ctx: WorkflowContext, n: int) -> int:
        if change != "drop":
            await ctx.step.set_attributes({"stage": "paid" if change != "value" else "x", "n": n})
        await ctx.step.sleep("nap", "1 day")
        await ctx.step.set_attributes({"stage": "done"})
        return n

    return app


@pytest.mark.parametrize("sync", [False, True])
async def test_attributes_set_in_the_environment_replay_and_are_checked(
    db_url: str, sync: bool
) -> None:
    app = build(sync=sync)
    database = "sqlite" if db_url.startswith("sqlite") else db_url
    async with Environment(app, database=database, auto_skip=True):
        handle = await app.get_workflow("order").start(7, attributes={"customer": "c-1"})
        assert await handle.result(timeout="20s") == 7  # the day skipped
        run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
        assert run.attributes == {"customer": "c-1", "stage": "done", "n": 7}
        found = await app.list_runs(attributes={"stage": "done", "customer": "c-1"})
        assert [r.run_id for r in found] == [handle.run_id]
    history = json.loads(json.dumps({"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}))
    assert [s["kind"] for s in history["steps"]] == ["attributes", "sleep", "attributes"]
    report = replay(build(sync=sync), history)
    assert report.finished and report.output == 7 and report.results_replayed == 3
    # What is set is data, not the path the code took (as an event's value).
    assert replay(build("value"), history).finished
    with pytest.raises(NonDeterminismError, match=r"position 1.*attributes step 'set_attributes'"):
        replay(build("drop"), history)
