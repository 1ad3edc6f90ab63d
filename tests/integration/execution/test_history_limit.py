"""A run's history is read whole by every claim of it, as one JSON value, and the
database's limit for one value is 1 GB (PostgreSQL's `json_agg`, SQLite's string length):
one run past it would fail the claim statement of every run of its workflow, for ever.
`max_step_attempts` x `max_payload_bytes` (1000 x 1 MiB by default, plus compensations)
reaches it, so a run's history has a limit of its own (`max_history_bytes`): the run's next
step attempt past it fails the run with `PayloadTooLarge`, and other runs go on. The test
uses a limit of 100 kB; on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from durably import Durably, RunFailedError
from tests.helpers import scaled

LIMIT = 100_000
CHUNK = 10_000


def _chunk() -> str:
    return "x" * CHUNK


async def test_a_run_past_its_history_limit_fails_and_other_runs_go_on(db_url: str) -> None:
    app = Durably(db_url, max_history_bytes=LIMIT)

    @app.workflow(name="hoard", version="v1")
    async def hoard(ctx: Any, parts: int) -> int:
        for part in range(parts):
            await ctx.step.run(f"part-{part}", _chunk)
            if part % 4 == 3:  # parks: the next claim counts the history it reads
                await ctx.step.sleep(f"nap-{part}", "1ms")
        return parts

    async with app, app.worker():
        big = await hoard.start(30)
        with pytest.raises(RunFailedError, match="history"):
            await big.result(timeout=scaled(30))
        run = await big.get()
        assert run.error is not None and run.error["type"] == "PayloadTooLarge"
        assert "max_history_bytes" in run.error["message"]
        parts = [s for s in await app.list_steps(big.run_id) if s.step.startswith("part-")]
        # Stopped at the first attempt past the limit: one chunk beyond it at most.
        assert LIMIT // CHUNK <= len(parts) <= LIMIT // CHUNK + 1, len(parts)

        small = await hoard.start(3)  # claims of the workflow go on
        assert await small.result(timeout=scaled(30)) == 3
        await app.resume(big.run_id)  # still past it: fails again, as clearly
        with pytest.raises(RunFailedError, match="history"):
            await big.result(timeout=scaled(30))
