"""`python -m bench stream`: a stream's latency and throughput (SPEC §4.21).

- latency: one workflow writes `--n` values with `ctx.step.write_stream`, a paced step
  (`--gap-ms`) between each two, so that the reader waits for every one; each sample is
  the time from the write call (the commit is in it) to the reader's yield, in one
  process (one clock); beside it the write's own time (its commit), and the time from
  the write's return to the yield.
- throughput: one workflow writes `--runs` values back to back; values/s from the first
  write to the reader's last yield.
The reader is a second app (its own pool and listening connection), as a client is.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from durably import Durably

from .scenarios import SCHEMA, reset, stats

WARM_UP = 20


def _app(url: str, called: dict[int, float], written: dict[int, float]) -> Durably:
    app = Durably(url, schema=SCHEMA)

    async def pause(ms: int) -> None:
        await asyncio.sleep(ms / 1000)

    @app.workflow(name="streambench", version="v1")
    async def streambench(ctx: Any, spec: dict[str, int]) -> int:
        for i in range(spec["n"]):
            if spec["gap_ms"]:
                await ctx.step.run(f"gap-{i}", pause, spec["gap_ms"])
            called[i] = time.perf_counter()
            await ctx.step.write_stream("s", i)
            written[i] = time.perf_counter()
        await ctx.step.close_stream("s")
        return spec["n"]

    return app


async def _follow(url: str, n: int, gap_ms: int) -> tuple[dict[int, float], dict[int, float],
                                                          dict[int, float], float]:  # fmt: skip
    called: dict[int, float] = {}
    written: dict[int, float] = {}
    read: dict[int, float] = {}
    app = _app(url, called, written)
    reader = Durably(url, schema=SCHEMA)
    async with app, reader, app.worker(concurrency=4):
        handle = await app.start("streambench", {"n": n, "gap_ms": gap_ms})
        async for i in reader.read_stream(handle.run_id, "s"):
            read[i] = time.perf_counter()
        await handle.result(timeout=600)
    return called, written, read, read[n - 1] - called[0]


async def stream(url: str, n: int, gap_ms: int, values: int) -> dict[str, Any]:
    await reset(url)
    total = WARM_UP + n
    called, written, read, _ = await _follow(url, total, gap_ms)
    samples = range(WARM_UP, total)
    to_yield = [(read[i] - called[i]) * 1000 for i in samples]
    commit = [(written[i] - called[i]) * 1000 for i in samples]
    # From the writer's return (its commit acknowledged) to the yield: the NOTIFY and the
    # reader's query; below 0 where the reader was quicker than the writer's workflow.
    after = [(read[i] - written[i]) * 1000 for i in samples]
    _, _, _, span = await _follow(url, values, 0)
    return {
        "system": "durably", "mode": "stream", "n": n, "gap_ms": gap_ms,
        "write_to_yield_ms": {**stats(to_yield), "p99": _p99(to_yield)},
        "write_commit_ms": {**stats(commit), "p99": _p99(commit)},
        "commit_to_yield_ms": {**stats(after), "p99": _p99(after)},
        "values": values, "values_per_s": round(values / span, 1),
    }  # fmt: skip


def _p99(xs: list[float]) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(0.99 * len(s)))], 2)
