"""`uv run python -m bench.burst --database URL [--burst 100000] [--runs 1000] [--planned stats]`

What a burst of pending runs that no worker serves costs a worker that serves something
else, right after it arrives: before any ANALYZE (autovacuum is off for runs here, as a
busy table's is between two of its passes). A worker of (bench, v2), concurrency 50, has
run a while: on an empty table (`--planned empty`), or on a backlog of 1,000 runs of its
own started in order and analyzed while due (`--planned stats`, as autovacuum would). Then
`--burst` runs of (bench, v1) are started in 4 transactions, then `--runs` of (bench, v2)
in one, and the worker drains those. Unlike bench.backlog, nothing is analyzed after the
burst. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import psycopg

from durably import Durably

from .scenarios import reset

SCHEMA = "durably_burst"


def _app(url: str) -> Durably:
    app = Durably(url, schema=SCHEMA)

    async def noop(i: int) -> int:
        return i

    @app.workflow(name="bench", version="v2")
    async def bench(ctx: Any, k: int) -> int:
        for i in range(3):
            await ctx.step.run(f"s{i}", noop, i)
        return k

    return app


def _insert(conn: psycopg.Connection[Any], version: str, n: int, tag: str, parts: int) -> None:
    """`n` pending runs of (bench, `version`), due now, in `parts` transactions."""
    for part in range(parts):
        conn.execute(
            f"""INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input,
                available_at)
            SELECT %s || g, 'default', 'bench', %s, 'pending', '1', now()
            FROM generate_series(1, %s) g""",
            (f"{tag}-{part}-", version, n // parts),
        )


def _left(conn: psycopg.Connection[Any], tag: str, n: int) -> int:
    """How many of the `n` runs tagged `tag` have not completed: read from runs_status, as
    a scan of the burst beside the worker would slow it down more than anything measured."""
    row = conn.execute(
        f"SELECT count(*) FROM {SCHEMA}.runs"
        " WHERE status = 'completed' AND workflow = 'bench' AND id LIKE %s",
        (f"{tag}-%",),
    ).fetchone()
    return n - (int(row[0]) if row else 0)


async def _drained(conn: psycopg.Connection[Any], tag: str, n: int) -> float:
    """Seconds until the `n` runs tagged `tag` have completed, from now."""
    t0 = time.perf_counter()
    conn.execute(f"SELECT pg_notify('durably_{SCHEMA}', 'run')")  # as a start notifies
    while _left(conn, tag, n):
        await asyncio.sleep(0.05)
    return time.perf_counter() - t0


async def main(url: str, burst: int, runs: int, planned: str) -> dict[str, Any]:
    await reset(url, SCHEMA)
    app = _app(url)
    async with app:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {SCHEMA}.runs SET (autovacuum_enabled = false)")
            conn.execute("SET enable_seqscan = off")  # see _left
            if planned == "stats":
                _insert(conn, "v2", 1000, "backlog", 1)
                conn.execute(f"ANALYZE {SCHEMA}.runs")
            async with app.worker(concurrency=50):
                if planned == "stats":
                    await _drained(conn, "backlog", 1000)
                await asyncio.sleep(1)  # idle: its statements planned
                _insert(conn, "v1", burst, "burst", 4)
                _insert(conn, "v2", runs, "served", 1)
                seconds = await _drained(conn, "served", runs)
    return {"mode": "burst", "planned": planned, "burst": burst, "runs": runs,
            "runs_per_s": round(runs / seconds, 1)}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.burst")
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--planned", choices=["empty", "stats"], default="stats")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.database, args.burst, args.runs, args.planned))))
