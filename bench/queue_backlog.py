"""`uv run python -m bench.queue_backlog --database URL [--backlog 100000] [--calls 200]`

What a full queue's backlog costs (SPEC §4.2's backlog rule, for queued runs): a worker
serves two queued workflows, `hog` on queue "full" (concurrency 1, one run running) and
`job` on queue "other". Timed on a fresh schema (`durably_backlog`, as bench.backlog), first with no
backlog, then with `--backlog` due, pending runs of `hog`: the claim of queue "other"
(with 10 due runs of its own, taken by the first call), the claim of the full queue (it
must read nothing: it has no room), and the unqueued claim. Median and p90 of `--calls`
calls each, the round trip included. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from bench import scenarios
from bench.backlog import SCHEMA, _insert_runs, _timed
from durably import Durably
from durably.store.queues import QueueClaims

HOG, JOB = [("hog", "v1")], [("job", "v1")]


def _app(url: str) -> Durably:
    app = Durably(url, schema=SCHEMA)
    full = app.queue("full", concurrency=1)
    other = app.queue("other", concurrency=50)

    async def body(ctx: Any) -> None:
        return None

    app.workflow(name="hog", version="v1", queue=full)(body)
    app.workflow(name="job", version="v1", queue=other)(body)
    return app


async def _queue_runs(app: Durably, url: str, prefix: str, queue: str, workflow: str,
                      n: int, ago: int) -> None:  # fmt: skip
    """`n` pending runs written straight into the table, then given their queue."""
    _insert_runs(url, prefix, workflow, "v1", n, ago)
    table = f"{SCHEMA}_runs" if url.startswith("sqlite") else f"{SCHEMA}.runs"
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(f"UPDATE {table} SET queue = ? WHERE id LIKE ? || '%'", (queue, prefix))
            conn.execute("ANALYZE")
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET queue = %s WHERE id LIKE %s || '%%'", (queue, prefix))
        conn.execute(f"VACUUM ANALYZE {table}")


async def _measure(app: Durably, url: str, calls: int, state: str) -> dict[str, Any]:
    await _queue_runs(app, url, f"own-{state}-", "other", "job", 10, ago=60)
    claims = QueueClaims(app.store)
    return {
        "claim_other_queue": await _timed(
            calls, lambda: claims.claim("other", "bench", JOB, 10, 30.0, per_key=False)
        ),
        "claim_full_queue": await _timed(
            calls, lambda: claims.claim("full", "bench", HOG, 10, 30.0, per_key=False)
        ),
        "claim_unqueued": await _timed(
            calls, lambda: app.store.claim("bench", [*HOG, *JOB], 10, 30.0)
        ),
    }


async def main(url: str, backlog: int, calls: int) -> dict[str, Any]:
    await scenarios.reset(url, SCHEMA)
    app = _app(url)
    async with app:
        await claims_declared(app)
        await _queue_runs(app, url, "running-", "full", "hog", 1, ago=7200)
        taken = await QueueClaims(app.store).claim("full", "holder", HOG, 1, 3600.0, False)
        assert len(taken) == 1, "the full queue's one slot"
        empty = await _measure(app, url, calls, "empty")
        await _queue_runs(app, url, "hog-", "full", "hog", backlog, ago=3600)
        full = await _measure(app, url, calls, "full")
    return {"mode": "queue_backlog", "database": url.split(":", 1)[0], "backlog": backlog,
            "empty": empty, "with_backlog": full}  # fmt: skip


async def claims_declared(app: Durably) -> None:
    await QueueClaims(app.store).declare(list(app.queues.values()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.queue_backlog")
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.database, args.backlog, args.calls))), flush=True)
