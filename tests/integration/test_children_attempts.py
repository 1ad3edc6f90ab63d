"""Children across the parent's attempts and at the edge of its timeout (issue 26): a
child's completion that races the parent's `run_workflow(timeout=)` is reported as
completed; a retry or a resume of the parent reuses the child at the same position (its
result, or the wait for it), never a second child doing the same work."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from durably import ChildWorkflowError, Durably, RetryPolicy, WorkflowTimeoutError
from tests.helpers import scaled

ONCE = RetryPolicy(max_attempts=1)


async def test_a_child_completing_as_its_timeout_runs_out_is_reported_completed(
    db_url: str,
) -> None:
    """60 pairs, each child's work lasting about its parent's timeout: every parent's
    outcome agrees with its child's final status (a child that completed is its parent's
    result, a child the parent gave up on is canceled)."""
    app = Durably(db_url)
    timeout = scaled(0.3)

    async def work(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @app.workflow(name="child", version="v1", retry=ONCE)
    async def child(ctx: Any, seconds: float) -> str:
        done: str = await ctx.step.run("work", work, seconds)
        return done

    @app.workflow(name="parent", version="v1", retry=ONCE)
    async def parent(ctx: Any, seconds: float) -> dict[str, Any]:
        try:
            got = await ctx.step.run_workflow(child, seconds, timeout=f"{timeout}s")
        except WorkflowTimeoutError as exc:
            return {"outcome": "timed out", "error": str(exc)}
        except ChildWorkflowError as exc:
            return {"outcome": "failed", "error": str(exc)}
        return {"outcome": got}

    rng = random.Random(26)
    async with app, app.worker(concurrency=60):
        handles = [await parent.start(timeout * rng.uniform(0.8, 1.2)) for _ in range(60)]
        outcomes = [await h.result(timeout=scaled(60)) for h in handles]
        kids = {r.parent_run_id: r for r in await app.list_runs(workflow="child", limit=100)}
        disagree = []
        for h, got in zip(handles, outcomes, strict=True):
            kid = kids[h.run_id]
            expected = "done" if kid.status == "completed" else "timed out"
            if kid.status not in ("completed", "canceled") or got["outcome"] != expected:
                disagree.append((kid.run_id, kid.status, got))
    assert not disagree, f"{len(disagree)} of 60 parents disagree with their child: {disagree}"
