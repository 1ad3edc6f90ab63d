"""Values JSON cannot hold (NaN, ±Infinity, U+0000, an int past 4300 digits) are refused
where they are produced, with InvalidInput naming the place, the same on both backends
(SPEC §4.20): a step or a workflow result fails for good through the normal path
(compensations run, children are canceled); a client's start or send writes nothing."""

from __future__ import annotations

import math
from typing import Any

import pytest

from durably import Durably, InvalidInput, RunFailedError, StepFailedError, WorkflowContext
from tests.helpers import eventually, scaled

# An int of over 4300 digits: Python writes it, but its reader (json.loads) refuses it.
UNHOLDABLE = [math.nan, math.inf, -math.inf, "a\x00b", {"k\x00": 1}, [1, {"x": math.nan}],
              {"n": -(10**4300)}]  # fmt: skip
IDS = ["nan", "inf", "-inf", "nul", "nul-key", "nested-nan", "huge-int"]


def _app(db_url: str, undone: list[str]) -> Durably:
    app = Durably(db_url)

    @app.workflow(name="child", version="v1")
    async def child(ctx: WorkflowContext, _: None) -> None:
        await ctx.step.wait_for_signal("never", timeout="1h")

    @app.workflow(name="parent", version="v1")
    async def parent(ctx: WorkflowContext, what: str) -> Any:
        await ctx.step.run("charge", lambda: 1, compensate=lambda _: undone.append("charge"))
        kid = ctx.step.start_workflow(child, None)
        await ctx.step.run("wait-for-child-start", lambda: None)
        if what == "result":
            return BAD[0]
        await ctx.step.run("bad", lambda: BAD[0])
        return await kid

    return app


BAD: list[Any] = [None]  # the value under test, read by the bodies (in process)


@pytest.mark.parametrize("value", UNHOLDABLE, ids=IDS)
@pytest.mark.parametrize("where", ["step", "result"])
async def test_a_result_json_cannot_hold_fails_the_run_through_the_normal_path(
    db_url: str, value: Any, where: str
) -> None:
    BAD[0] = value
    undone: list[str] = []
    app = _app(db_url, undone)
    async with app, app.worker(concurrency=4):
        handle = await app.start("parent", where)
        with pytest.raises(RunFailedError):
            await handle.result(timeout=scaled(20))
        run = await app.get_run(handle.run_id)
        kids = [r for r in await app.list_runs(workflow="child") if r.parent_run_id == run.run_id]
        assert len(kids) == 1
        await eventually(lambda: _status(app, kids[0].run_id, "canceled"), what="child canceled")
        steps = {s.step: s for s in await app.list_steps(handle.run_id)}
    assert undone == ["charge"]
    error = run.error or {}
    if where == "step":
        assert steps["bad"].status == "failed" and steps["bad"].final
        assert steps["bad"].attempt == 1  # not retried: the same result would come back
        cause = steps["bad"].error or {}
        assert cause["type"] == "InvalidInput" and "the result of step 'bad'" in cause["message"]
        assert error["type"] == "StepFailedError" and error["step"] == "bad"
    else:
        assert error["type"] == "InvalidInput" and "the workflow's result" in error["message"]


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


@pytest.mark.parametrize("value", UNHOLDABLE, ids=IDS)
async def test_a_client_s_input_or_signal_json_cannot_hold_is_refused_unwritten(
    db_url: str, value: Any
) -> None:
    app = Durably(db_url)

    @app.workflow(name="takes", version="v1")
    async def takes(ctx: WorkflowContext, v: Any) -> None:
        return None

    async with app:
        with pytest.raises(InvalidInput, match="input of workflow 'takes'"):
            await takes.start(value)
        with pytest.raises(InvalidInput, match="the data of signal 'go'"):
            await app.send_signal("go", value)
        assert await app.list_runs() == []
        assert await app.list_signals(pending=False) == []


@pytest.mark.parametrize("value", UNHOLDABLE, ids=IDS)
async def test_an_event_or_a_signal_a_workflow_sends_is_refused_at_the_call(
    db_url: str, value: Any
) -> None:
    app = Durably(db_url)

    @app.workflow(name="publishes", version="v1")
    async def publishes(ctx: WorkflowContext, _: None) -> list[str]:
        refused = []
        for call in (lambda: ctx.step.set_event("progress", value),
                     lambda: ctx.step.send_signal("go", value)):  # fmt: skip
            try:
                await call()
            except InvalidInput as exc:
                refused.append(str(exc).split(" is not JSON")[0].split(" holds")[0])
        return refused

    async with app, app.worker(concurrency=2):
        handle = await publishes.start(None)
        assert await handle.result(timeout=scaled(20)) == [
            "the value of event 'progress'", "the data of signal 'go'"
        ]  # fmt: skip
        assert await app.list_events(handle.run_id) == {}
        assert await app.list_signals(pending=False) == []


@pytest.mark.parametrize("value", UNHOLDABLE, ids=IDS)
async def test_a_child_s_input_json_cannot_hold_fails_its_step_for_good(
    db_url: str, value: Any
) -> None:
    app = Durably(db_url)

    @app.workflow(name="kid", version="v1")
    async def kid(ctx: WorkflowContext, v: Any) -> None:
        return None

    @app.workflow(name="starts", version="v1")
    async def starts(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.step.run_workflow(kid, value)
        except StepFailedError as exc:
            return f"{exc.error['type']}: {exc.error['message'].split(' is not JSON')[0]}"
        return "started"

    async with app, app.worker(concurrency=2):
        handle = await starts.start(None)
        got = await handle.result(timeout=scaled(20))
        assert [r.workflow for r in await app.list_runs()] == ["starts"]
    assert got.startswith("InvalidInput: input of workflow 'kid'")
