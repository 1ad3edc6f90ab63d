"""`uv run python -m bench.purge --database URL [--finished 1000000] [--steps 3]`

Claim latency while a big purge runs (§4.18: a purge in short batches must not stall
running workers). On a fresh schema (`durably_purge`) it writes `--finished` completed
runs with `--steps` step attempts each, finished a day ago, then times claims of a worker
that keeps getting new work (one pending run started and claimed at a time), first alone,
then while `app.purge(older_than="1h")` deletes every finished run. It prints the median,
p99 and max claim time of each phase and how long the purge took; the last line printed is
one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import psycopg

from durably import Durably

from . import scenarios

SCHEMA = "durably_purge"
PAIRS = [("bench", "v1")]


PG_FILL = """
INSERT INTO {s}.runs (id, namespace, workflow, version, status, attempts, max_attempts,
    created_at, finished_at, updated_at)
SELECT 'old-' || g, 'default', 'bench', 'v1', 'completed', 1, 1,
    now() - interval '1 day', now() - interval '1 day', now()
FROM generate_series(CAST(%(lo)s AS integer), CAST(%(hi)s AS integer)) g;
INSERT INTO {s}.step_attempts (run_id, position, attempt, step, kind, status, fence, seq)
SELECT 'old-' || g, p, 1, 'step' || p, 'function', 'completed', 1, p
FROM generate_series(CAST(%(lo)s AS integer), CAST(%(hi)s AS integer)) g,
    generate_series(1, CAST(%(steps)s AS integer)) p;
"""

SQLITE_FILL = """
WITH RECURSIVE g(n) AS (SELECT :lo UNION ALL SELECT n + 1 FROM g WHERE n < :hi)
INSERT INTO {s}_runs (id, namespace, workflow, version, status, attempts, max_attempts,
    created_at, finished_at, updated_at)
SELECT 'old-' || n, 'default', 'bench', 'v1', 'completed', 1, 1, :ago, :ago, :ago FROM g;
WITH RECURSIVE g(n) AS (SELECT :lo UNION ALL SELECT n + 1 FROM g WHERE n < :hi),
    p(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM p WHERE k < :steps)
INSERT INTO {s}_step_attempts (run_id, position, attempt, step, kind, status, fence, seq)
SELECT 'old-' || n, k, 1, 'step' || k, 'function', 'completed', 1, k FROM g, p;
"""


async def _fill(url: str, finished: int, steps: int) -> None:
    chunk = 50_000
    for lo in range(1, finished + 1, chunk):
        hi = min(lo + chunk - 1, finished)
        if url.startswith("sqlite"):
            import sqlite3

            with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
                for statement in SQLITE_FILL.format(s=SCHEMA).split(";\n"):
                    if statement.strip():
                        conn.execute(statement, {"lo": lo, "hi": hi, "steps": steps,
                                                 "ago": time.time() - 86400})  # fmt: skip
        else:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                for statement in PG_FILL.format(s=SCHEMA).split(";\n"):
                    if statement.strip():
                        await conn.execute(statement,
                                           {"lo": lo, "hi": hi, "steps": steps})  # fmt: skip


async def _claims(app: Durably, stop: asyncio.Event, times: list[float]) -> None:
    """Start one run and claim it, again and again: each claim's time."""
    while not stop.is_set():
        await app.start("bench")
        began = time.perf_counter()
        rows = await app.store.claim("bench-worker", PAIRS, 1, 30)
        times.append(time.perf_counter() - began)
        for row in rows:
            await app.store.db.fetch("release", run_id=row["id"], fence=row["fence"],
                                     worker_id="bench-worker")  # fmt: skip
            await app.cancel(row["id"])


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times) or [0.0]
    return {
        "claims": len(times), "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1 if len(ordered) > 1 else 0] * 1000,
        "max_ms": ordered[-1] * 1000,
    }  # fmt: skip


async def main(url: str, finished: int, steps: int, baseline_s: float) -> dict[str, Any]:
    await scenarios.reset(url, SCHEMA)
    app = Durably(url, schema=SCHEMA)

    @app.workflow(name="bench", version="v1")
    async def bench(ctx: Any) -> None:
        return None

    async with app:
        await _fill(url, finished, steps)
        print(f"{finished} finished runs with {steps} steps each written", flush=True)
        alone: list[float] = []
        stop = asyncio.Event()
        task = asyncio.create_task(_claims(app, stop, alone))
        await asyncio.sleep(baseline_s)
        stop.set()
        await task
        during: list[float] = []
        stop = asyncio.Event()
        task = asyncio.create_task(_claims(app, stop, during))
        began = time.perf_counter()
        purged = await app.purge(older_than="1h")
        took = time.perf_counter() - began
        stop.set()
        await task
    result = {"purged": purged, "purge_s": took, "alone": _summary(alone),
              "during_purge": _summary(during)}  # fmt: skip
    print(f"alone:        {result['alone']}")
    print(f"during purge: {result['during_purge']} ({took:.1f}s to purge {purged})")
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.purge")
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--baseline", type=float, default=5.0, help="seconds of claims alone")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.database, args.finished, args.steps, args.baseline))))
