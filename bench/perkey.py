"""`python -m bench perkey`: what a per-key strategy (SPEC §4.23) costs a queue's starts and
claims, beside `on_full="wait"` (today's queue), alternating `--pairs` times.

For each strategy, on a fresh schema, a queue with `per_key=1`:
- `start_seq_per_s`: `--runs` starts one after the other, on `--keys` keys in turn (with
  `cancel_*` most of them cancel a run or themselves: the admission's full work);
- `start_par_per_s`: the same starts, 16 at a time (admissions of one key queue up);
- `drain_runs_per_s`: `--runs` runs on keys of their own (none canceled), drained by one
  worker of `--concurrency`: the claim path, the same query for every strategy.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from durably import Durably

from .scenarios import SCHEMA, _Reader, _span, reset

STRATEGIES = ("wait", "cancel_new", "cancel_running")


def _app(url: str, on_full: str) -> Durably:
    app = Durably(url, schema=SCHEMA)
    queue = app.queue("bench", per_key=1, on_full=on_full)

    async def noop(i: int) -> int:
        return i

    @app.workflow(name="bench", version="v1", queue=queue)
    async def bench(ctx: Any, k: int) -> int:
        for i in range(3):
            await ctx.step.run(f"s{i}", noop, i)
        return k

    return app


async def _starts(url: str, on_full: str, runs: int, keys: int, parallel: int) -> float:
    await reset(url)
    app = _app(url, on_full)
    async with app:
        await app.start("bench", -1, concurrency_key="warm")  # connections, statements
        gate = asyncio.Semaphore(parallel)

        async def start(k: int) -> None:
            async with gate:
                await app.start("bench", k, concurrency_key=f"k{k % keys}")

        t0 = time.perf_counter()
        if parallel == 1:
            for k in range(runs):
                await start(k)
        else:
            await asyncio.gather(*(start(k) for k in range(runs)))
        return runs / (time.perf_counter() - t0)


async def _drain(url: str, on_full: str, runs: int, concurrency: int) -> float:
    await reset(url)
    app = _app(url, on_full)
    async with app:
        for k in range(runs):
            await app.start("bench", k, concurrency_key=f"k{k}")
        async with app.worker(concurrency=concurrency), _Reader(app) as reader:
            while await reader.completed() < runs:
                await asyncio.sleep(0.05)
        return runs / await _span(app, url)


async def perkey(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, dict[str, list[float]]] = {
        s: {"start_seq_per_s": [], "start_par_per_s": [], "drain_runs_per_s": []}
        for s in STRATEGIES
    }
    for _ in range(args.pairs):
        for s in STRATEGIES:
            f = figures[s]
            f["start_seq_per_s"].append(await _starts(args.database, s, args.runs, args.keys, 1))
            f["start_par_per_s"].append(await _starts(args.database, s, args.runs, args.keys, 16))
            f["drain_runs_per_s"].append(
                await _drain(args.database, s, args.runs, args.concurrency)
            )
    medians = {s: {k: round(statistics.median(v), 1) for k, v in f.items()}
               for s, f in figures.items()}  # fmt: skip
    return {
        "system": "durably",
        "mode": "perkey",
        "n": args.runs,
        "keys": args.keys,
        "concurrency": args.concurrency,
        "pairs": args.pairs,
        "median": medians,
        "ratio_to_wait": {
            s: {k: round(v / medians["wait"][k], 3) for k, v in m.items()}
            for s, m in medians.items()
            if s != "wait"
        },
    }
