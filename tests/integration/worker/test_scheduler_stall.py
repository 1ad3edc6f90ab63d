"""A scheduler that wakes late (its worker was stopped, its loop blocked, the machine
slept) starts only what its schedule says of missed ticks: the newest one without
backfill, at most MAX_BACKFILL with it, never one run per tick missed (issue 26)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from durably import Durably
from durably.core.clock import Clock
from durably.worker import scheduler
from tests.helpers import eventually


class JumpingClock(Clock):
    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


@pytest.mark.parametrize("backfill", [False, True])
async def test_a_late_scheduler_starts_what_its_schedule_says(
    db_url: str, backfill: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler, "MAX_BACKFILL", 5)
    clock = JumpingClock()
    app = Durably(db_url, clock=clock)

    @app.workflow(name="every-second", schedule="* * * * * *", backfill=backfill)
    async def every_second(ctx: Any, tick: dict[str, str]) -> str:
        return tick["scheduled_at"]

    async def ticks() -> list[str]:
        runs = await app.list_runs(workflow="every-second", limit=10_000)
        return sorted(r.input["scheduled_at"] for r in runs)

    async with app, app.worker():
        await eventually(ticks, what="the first tick's run")
        before = len(await ticks())
        clock.offset += 3600  # an hour passes in one step: 3,600 ticks missed
        jumped = datetime.fromtimestamp(clock.time(), UTC).isoformat()

        async def caught_up() -> list[str]:  # the tick of the jump's second has its run
            return [t for t in await ticks() if t >= jumped[:19]]

        await eventually(caught_up, timeout=30, what="a run of a tick after the jump")
        if backfill:  # the newest 5 missed, oldest first: the jump's own may be the 4th

            async def backfilled() -> bool:
                return len(await ticks()) - before >= 5

            await eventually(backfilled, what="the 5 newest missed ticks")
        late = len(await ticks()) - before
    assert late <= (5 + 2 if backfill else 2), late  # not one a tick missed: 3,600
