"""A sync body raising StopIteration (a `next()` on an exhausted iterator) fails its step
by policy, on both backends: it cannot cross the future its thread's outcome comes back
through (asyncio refuses it, and the step waited for ever), so it is carried as any
failure and stored as the StopIteration it was."""

from __future__ import annotations

from typing import Any

import pytest

from durably import Durably, RetryPolicy, StepContext, WorkflowContext
from tests.helpers import scaled

TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")


def exhausted(*_: Any) -> None:
    next(iter(()))


def exhausted_with_ctx(ctx: StepContext) -> None:
    next(iter(()))


@pytest.mark.parametrize("kind", ["function", "with-context", "transaction"])
async def test_a_sync_body_raising_stop_iteration_fails_its_step_by_policy(
    db_url: str, kind: str
) -> None:
    app = Durably(db_url)

    @app.workflow(name="iterates", version="v1")
    async def iterates(ctx: WorkflowContext) -> None:
        if kind == "function":
            await ctx.step.run("next", exhausted, retry=TWICE)
        elif kind == "with-context":
            await ctx.step.run("next", exhausted_with_ctx, retry=TWICE)
        else:
            await ctx.step.transaction("next", exhausted, retry=TWICE)

    async with app, app.worker():
        run = await (await iterates.start()).wait(timeout=scaled(20))
        steps = await app.list_steps(run.run_id)
    assert run.status == "failed", run.error
    assert run.error is not None and run.error["cause"]["type"] == "StopIteration", run.error
    assert [(s.attempt, s.status, (s.error or {}).get("type")) for s in steps] == [
        (1, "failed", "StopIteration"), (2, "failed", "StopIteration")
    ]  # fmt: skip
