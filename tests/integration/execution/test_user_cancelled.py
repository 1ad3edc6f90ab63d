"""An `asyncio.CancelledError` raised by user code (a library leaking one) is not the
engine's own cancellation (SPEC §4.20): in a transaction body, sync or async, it fails
that step by its policy, on both backends, as it does in a function step's body."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durably import Durably, RetryPolicy, WorkflowContext
from tests.helpers import scaled

TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")


def sync_body(conn: Any) -> None:
    raise asyncio.CancelledError("leaked")


async def async_body(conn: Any) -> None:
    raise asyncio.CancelledError("leaked")


@pytest.mark.parametrize("body", [sync_body, async_body], ids=["sync", "async"])
async def test_a_cancelled_error_from_a_transaction_body_fails_its_step(
    db_url: str, body: Any
) -> None:
    app = Durably(db_url)

    @app.workflow(name="leaks", version="v1")
    async def leaks(ctx: WorkflowContext) -> None:
        await ctx.step.transaction("tx", body, retry=TWICE)

    async with app, app.worker():
        run = await (await leaks.start()).wait(timeout=scaled(20))
        steps = await app.list_steps(run.run_id)
    assert run.status == "failed", run.error
    assert run.error is not None and run.error["type"] == "StepFailedError", run.error
    assert [(s.attempt, s.status) for s in steps] == [(1, "failed"), (2, "failed")]
    assert all("CancelledError" in str(s.error) for s in steps), steps


async def test_a_cancelled_error_from_a_compensation_is_its_failure(db_url: str) -> None:
    app = Durably(db_url)
    tries: list[int] = []

    async def undo(value: str) -> None:
        tries.append(len(tries) + 1)
        if len(tries) == 1:
            raise asyncio.CancelledError("leaked")

    def fail() -> None:
        raise ValueError("charge refused")

    @app.workflow(name="undoes", version="v1")
    async def undoes(ctx: WorkflowContext) -> None:
        await ctx.step.run("reserve", lambda: "r", compensate=undo)
        await ctx.step.run("charge", fail, retry=RetryPolicy(max_attempts=1))

    async with app, app.worker():
        run = await (await undoes.start()).wait(timeout=scaled(30))
        steps = await app.list_steps(run.run_id)
    assert run.status == "failed" and run.error is not None, run.error
    assert run.error["type"] == "StepFailedError", run.error  # the workflow's own failure
    assert [(s.attempt, s.status) for s in steps if s.position < 0] == [
        (1, "failed"),
        (2, "completed"),
    ]
    assert tries == [1, 2]
