"""One workflow whose queue a deploy renames or removes (MOVED_QUEUE: the queue's name in
this deploy; empty: no queue). Its step writes `start` to the business ledger, then holds
for MOVED_HOLD seconds, then writes `end`."""

from __future__ import annotations

import os
import time
from typing import Any

from durably import Durably, StepContext
from tests.apps import seed

URL = os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db")
app = Durably(URL)
NAME = os.environ.get("MOVED_QUEUE", "downloads")
HOLD = float(os.environ.get("MOVED_HOLD", "0.2"))
queue = app.queue(NAME, concurrency=1) if NAME else None


def hold(ctx: StepContext) -> None:
    seed.ledger(ctx, "start")
    deadline = time.monotonic() + HOLD
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    seed.ledger(ctx, "end")


@app.workflow(name="moved", version="v1", queue=queue)
async def moved(ctx: Any, k: int) -> int:
    await ctx.step.run("hold", hold)
    return k
