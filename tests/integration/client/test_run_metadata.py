"""Workflow code reads its run's metadata from its context, read-only and the same on
every replay (issue 31 item 14, from OpenWorkflow's suite)."""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime
from typing import Any

import pytest

from durably import Durably, SyncWorkflowContext, WorkflowContext
from tests.helpers import eventually, scaled


async def _waiting(handle: Any) -> bool:
    return bool((await handle.get()).status == "waiting")


async def test_a_workflow_sees_its_runs_times_and_attempt_on_every_replay(db_url: str) -> None:
    app = Durably(db_url)
    seen: list[tuple[Any, ...]] = []
    refused: list[str] = []

    @app.workflow(name="meta", version="v1")
    async def meta(ctx: WorkflowContext) -> None:
        seen.append((ctx.run_id, ctx.attempt, ctx.created_at, ctx.started_at))
        try:
            ctx.attempt = 7  # type: ignore[misc]
        except dataclasses.FrozenInstanceError:
            refused.append("attempt")
        await ctx.step.wait_for_signal("go")  # parks: the next claim replays

    @app.workflow(name="meta-sync", version="v1")
    def meta_sync(ctx: SyncWorkflowContext) -> None:
        seen.append((ctx.run_id, ctx.attempt, ctx.created_at, ctx.started_at))
        try:
            ctx.run_id = "other"  # type: ignore[misc]
        except AttributeError:  # FrozenInstanceError is one
            refused.append("run_id")
        ctx.step.wait_for_signal("go")

    async with app, app.worker():
        for wf in (meta, meta_sync):
            seen.clear()
            handle = await wf.start()
            # Sent once it waits (a short sleep, or a signal sent first, may not park it).
            await eventually(functools.partial(_waiting, handle), what="the run to park")
            await app.send_signal("go", None)
            await handle.result(timeout=scaled(10))
            run = await handle.get()
            assert len(seen) == 2  # live, then replayed after the sleep
            assert seen[0] == seen[1] == (run.run_id, 1, run.created_at, run.started_at)
            assert isinstance(seen[0][2], datetime) and isinstance(seen[0][3], datetime)
    assert refused == ["attempt", "attempt", "run_id", "run_id"]


def test_the_context_is_read_only() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx = WorkflowContext("r", "w", "v1", 1, None)  # type: ignore[arg-type]
        ctx.input = 3  # type: ignore[misc]
