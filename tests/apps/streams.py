"""Streams (§4.21) as an app the acceptance tests run in worker processes: `streamer`
writes `count` values to its stream "tokens", one step between each two; with
KILL_MARKER set, the worker that first reaches value `kill_at` is killed (SIGKILL) there,
once (the marker file says it happened), right after the write committed."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from durably import Durably, StepContext

URL = os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db")
app = Durably(URL)


def pace(ctx: StepContext, i: int, kill_at: int) -> int:
    marker = os.environ.get("KILL_MARKER")
    if marker and i == kill_at and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return i


@app.workflow(name="streamer", version="v1")
async def streamer(ctx: Any, spec: dict[str, int]) -> int:
    for i in range(spec["count"]):
        await ctx.step.write_stream("tokens", {"i": i})
        await ctx.step.run(f"pace-{i}", pace, i, spec.get("kill_at", -1))
    await ctx.step.close_stream("tokens")
    return spec["count"]
