"""`uv run python -m bench attributes --database URL [--finished 1000000] [--n 500]
[--runs 2000] [--pairs 3]`: search attributes (SPEC §4.24).

On a fresh schema (`durably_bench`) it writes `--finished` runs with attributes
(`customer`: one of 10,000, so 100 runs each; `amount`: 0..99; `region`: one of 4) and
one run in 10 without any, in one INSERT ... SELECT over generate_series (a recursive CTE
on SQLite, whose triggers fill its attribute table), then times `app.list_runs` from the
client, `--n` calls each: by one attribute (`customer`, 100 runs match, the default page
of 100), by two (`customer` and `amount`, 1 run), and by one that no run has. Then the
cost of attributes on start: `--runs` sequential `app.start` calls with three attributes
against as many without, alternating `--pairs` times on the same table. The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import time
from typing import Any

import psycopg

from . import scenarios

SCHEMA = scenarios.SCHEMA
CUSTOMERS = 10_000

PG_FILL = """
INSERT INTO {s}.runs (id, namespace, workflow, version, status, input, output, attempts,
    available_at, created_at, started_at, finished_at, attributes)
SELECT 'done-' || g, 'default', 'bench', 'v1', 'completed', '1', '1', 1, NULL,
    now() - interval '1 day' + g * interval '1 ms', now() - interval '1 day',
    now() - interval '1 day',
    CASE WHEN g % 10 <> 0 THEN jsonb_build_object('customer', 'c-' || (g % {c}),
        'amount', g % 100, 'region', (ARRAY['eu', 'us', 'ap', 'sa'])[1 + g % 4]) END
FROM generate_series(1, {n}) g
"""

SQLITE_FILL = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {n})
INSERT INTO {s}_runs (id, namespace, workflow, version, status, input, output, attempts,
    created_at, started_at, finished_at, updated_at, attributes)
SELECT 'done-' || n, 'default', 'bench', 'v1', 'completed', '1', '1', 1,
    {ago} + n / 1000.0, {ago}, {ago}, {ago},
    CASE WHEN n % 10 <> 0 THEN json_object('customer', 'c-' || (n % {c}), 'amount', n % 100,
        'region', CASE n % 4 WHEN 0 THEN 'eu' WHEN 1 THEN 'us' WHEN 2 THEN 'ap' ELSE 'sa' END)
    END
FROM g
"""


async def _fill(url: str, finished: int) -> float:
    """Write the runs straight into the table; the seconds it took (ANALYZE included)."""
    t0 = time.perf_counter()
    if url.startswith("sqlite"):
        lite = sqlite3.connect(url.removeprefix("sqlite:///"))
        with lite:
            lite.execute(SQLITE_FILL.format(s=SCHEMA, n=finished, c=CUSTOMERS,
                                            ago=time.time() - 86400))  # fmt: skip
        lite.execute("ANALYZE")
        lite.close()
    else:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(PG_FILL.format(s=SCHEMA, n=finished, c=CUSTOMERS))
            await conn.execute(f"VACUUM ANALYZE {SCHEMA}.runs")
    return round(time.perf_counter() - t0, 1)


def _ms(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"p50": round(statistics.median(s), 3), "p99": round(s[int(0.99 * (len(s) - 1))], 3),
            "max": round(s[-1], 3)}  # fmt: skip


async def _time_lists(app: Any, n: int, make: Any) -> tuple[dict[str, float], int]:
    times, found = [], 0
    for _ in range(n):
        wanted = make()
        t0 = time.perf_counter()
        runs = await app.list_runs(attributes=wanted)
        times.append((time.perf_counter() - t0) * 1000)
        found += len(runs)
    return _ms(times), found // n


async def _starts(app: Any, runs: int, with_attributes: bool) -> float:
    t0 = time.perf_counter()
    for k in range(runs):
        attributes = {"customer": f"new-{k}", "amount": k, "vip": k % 2 == 0}
        await app.start("bench", k, available_at="+1h",
                        attributes=attributes if with_attributes else None)  # fmt: skip
    return runs / (time.perf_counter() - t0)


async def attributes(args: argparse.Namespace) -> dict[str, Any]:
    url = args.database
    await scenarios.reset(url)
    app = scenarios.make_app(url)
    rng = random.Random(29)
    async with app:
        await app.migrate()
        fill_s = await _fill(url, args.finished)

        def one() -> dict[str, Any]:
            return {"customer": f"c-{rng.randrange(CUSTOMERS)}"}

        def two() -> dict[str, Any]:
            c = rng.randrange(CUSTOMERS)
            return {"customer": f"c-{c}", "amount": c % 100}

        await _time_lists(app, 20, one)  # warm: connections, plans, caches
        by_one, found_one = await _time_lists(app, args.n, one)
        by_two, found_two = await _time_lists(app, args.n, two)
        by_none, _ = await _time_lists(app, args.n, lambda: {"customer": "nobody"})
        plain: list[float] = []
        tagged: list[float] = []
        await _starts(app, 200, True)  # warm
        for _ in range(args.pairs):
            plain.append(await _starts(app, args.runs, False))
            tagged.append(await _starts(app, args.runs, True))
    return {
        "system": "durably",
        "mode": "attributes",
        "backend": "sqlite" if url.startswith("sqlite") else "postgresql",
        "finished": args.finished,
        "fill_s": fill_s,
        "list_one_key_ms": {**by_one, "runs": found_one},
        "list_two_keys_ms": {**by_two, "runs": found_two},
        "list_no_match_ms": by_none,
        "start_runs_per_s": [round(x, 1) for x in plain],
        "start_with_attributes_runs_per_s": [round(x, 1) for x in tagged],
        "start_cost": round(
            1 - statistics.median(t / p for t, p in zip(tagged, plain, strict=True)), 3
        ),
    }
