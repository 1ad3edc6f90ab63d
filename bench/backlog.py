"""`uv run python -m bench.backlog --database URL [--backlog 100000] [--calls 200]`

What a backlog of runs that no worker serves costs a worker that serves something else:
the `claim` and `next_due` of a worker registered for (bench, v1), timed on a fresh schema
(`durably_backlog`) first empty, then holding `--backlog` due, pending runs of (old, v0).

For each state it prints the median and p90 of `--calls` calls of each query through the
engine's store (the round trip included; with nothing of the worker's due, the claim a busy
or idle worker makes again and again; with `--served` the backlog is the worker's own, and
each timed claim takes 10 of it), and the plan of one claim that takes 10 due runs of
its own, rolled back (PostgreSQL: EXPLAIN ANALYZE; SQLite: EXPLAIN QUERY PLAN). The last
line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3
import statistics
import time
from typing import Any

import psycopg

from durably import Durably

from . import scenarios

SCHEMA = "durably_backlog"
PAIRS = [("bench", "v1")]


def _insert_runs(url: str, prefix: str, workflow: str, version: str, n: int, ago: int) -> None:
    """`n` pending runs of (workflow, version), due from `ago` seconds ago, 1 ms apart."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                f"""WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :n)
                INSERT INTO {SCHEMA}_runs (id, namespace, workflow, version, status, input,
                    available_at)
                SELECT :prefix || i, 'default', :workflow, :version, 'pending', '1',
                    unixepoch('now') - :ago + i / 1000.0
                FROM g""",
                {"n": n, "prefix": prefix, "ago": ago, "workflow": workflow, "version": version},
            )
            conn.execute("ANALYZE")
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"""INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input,
                available_at)
            SELECT %s || g, 'default', %s, %s, 'pending', '1',
                now() - %s * interval '1 second' + g * interval '1 millisecond'
            FROM generate_series(1, %s) g""",
            (prefix, workflow, version, ago, n),
        )
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.runs")


async def _timed(calls: int, fn: Any) -> dict[str, float]:
    await fn()  # warm up
    ms = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await fn()
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    return {"median_ms": round(statistics.median(ms), 3), "p90_ms": round(ms[int(0.9 * calls)], 3)}


def _claim_plan(app: Durably, url: str) -> dict[str, Any]:
    """The plan of one claim that takes the 10 due runs of the worker's own, rolled back."""
    statements = app.connector._queries["claim"]  # type: ignore[attr-defined]
    params = {"worker_id": "bench", "workflows": [p[0] for p in PAIRS],
              "versions": [p[1] for p in PAIRS], "limit": 10, "lease": 30.0,
              "token": "plan"}  # fmt: skip
    if url.startswith("sqlite"):
        # The engine's own connection: its plan depends on the statistics it has loaded.
        lite = app.connector._conn  # type: ignore[attr-defined]
        args = {k: json.dumps(v) if isinstance(v, list) else v for k, v in params.items()}
        return {
            "plan": [row[3] for row in lite.execute(f"EXPLAIN QUERY PLAN {statements[0]}", args)]
        }
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {statements[0]}", params).fetchall()
        conn.rollback()
    plan = [r[0] for r in rows]
    text = "\n".join(plan)
    found = re.search(r"Execution Time: ([\d.]+) ms", text)
    removed = sum(int(n) for n in re.findall(r"Rows Removed by (?:Join )?Filter: (\d+)", text))
    return {"execution_ms": float(found.group(1)) if found else None,
            "rows_removed_by_filters": removed, "plan": plan}  # fmt: skip


async def _measure(app: Durably, url: str, calls: int, state: str) -> dict[str, Any]:
    """10 due runs of the worker's own, due after any backlog: the plan of claiming them
    (rolled back), then the timed calls (the first one claims them, the rest find none)."""
    _insert_runs(url, f"own-{state}-", "bench", "v1", 10, ago=60)
    plan = _claim_plan(app, url)
    store = app.store
    return {
        "claim": await _timed(calls, lambda: store.claim("bench", PAIRS, 10, 30.0)),
        "next_due": await _timed(calls, lambda: store.next_due(PAIRS)),
        "claim_plan": plan,
    }


async def main(url: str, backlog: int, calls: int, served: bool) -> dict[str, Any]:
    await scenarios.reset(url, SCHEMA)
    app = Durably(url, schema=SCHEMA)
    async with app:
        empty = await _measure(app, url, calls, "empty")
        pair = PAIRS[0] if served else ("old", "v0")
        _insert_runs(url, "old-", *pair, backlog, ago=3600)
        full = await _measure(app, url, calls, "full")
    return {"mode": "backlog", "database": url.split(":", 1)[0], "backlog": backlog,
            "backlog_served": served,
            "empty": empty, "with_backlog": full}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.backlog")
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument(
        "--served",
        action="store_true",
        help="the backlog is of the worker's own version (each claim takes 10)",
    )
    parser.add_argument("--plans", action="store_true", help="print the query plans")
    args = parser.parse_args()
    result = asyncio.run(main(args.database, args.backlog, args.calls, args.served))
    if args.plans:
        for state in ("empty", "with_backlog"):
            print(f"-- claim plan, {state}:\n" + "\n".join(result[state]["claim_plan"]["plan"]))
    for state in ("empty", "with_backlog"):
        result[state]["claim_plan"].pop("plan")
    print(json.dumps(result), flush=True)
