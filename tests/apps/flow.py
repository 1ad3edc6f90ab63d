"""Queues and schedules (§4.17), as an app the acceptance tests run in worker processes.

Each queued workflow holds its slot for FLOW_HOLD seconds in a step that writes `start`
and `end` to the business ledger (see `seed.ledger`). The workflows of the per-key
strategies (§4.23), `latest` and `single`, first reserve (ledger `reserve`; its undo
writes `undo`), then hold. Scheduled workflows are registered
only with FLOW_SCHEDULE=1, so that the queue tests' workers start no scheduled runs.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

import psycopg

from durably import Durably, StepContext
from tests.apps import seed

URL = os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db")
app = Durably(URL)
HOLD = float(os.environ.get("FLOW_HOLD", "0.3"))

limited = app.queue("limited", concurrency=3)
keyed = app.queue("keyed", per_key=1)
rated = app.queue("rated", rate="2/1s")
ranked = app.queue("ranked", concurrency=1, priority=True)
latest = app.queue("latest", per_key=1, on_full="cancel_running")
single = app.queue("single", per_key=1, on_full="cancel_new")


def hold(ctx: StepContext) -> None:
    seed.ledger(ctx, "start")
    deadline = time.monotonic() + HOLD
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    seed.ledger(ctx, "end")


def _queued(name: str, queue: Any) -> None:
    async def body(ctx: Any, k: int) -> int:
        await ctx.step.run("hold", hold)
        return k

    app.workflow(name=name, version="v1", queue=queue)(body)


for _name, _queue in [("limited", limited), ("keyed", keyed), ("rated", rated),
                      ("ranked", ranked)]:  # fmt: skip
    _queued(_name, _queue)


def reserve(ctx: StepContext, k: int) -> int:
    seed.ledger(ctx, "reserve")
    return k


def unreserve(ctx: StepContext, k: int) -> None:
    seed.ledger(ctx, "undo")


def _reserving(name: str, queue: Any) -> None:
    async def body(ctx: Any, k: int) -> int:
        await ctx.step.run("reserve", reserve, k, compensate=unreserve)
        await ctx.step.run("hold", hold)
        return k

    app.workflow(name=name, version="v1", queue=queue)(body)


for _name, _queue in [("latest", latest), ("single", single)]:
    _reserving(_name, _queue)


if os.environ.get("FLOW_SCHEDULE") == "1":

    @app.workflow(name="every-second", schedule="* * * * * *")
    async def every_second(ctx: Any, tick: dict[str, str]) -> str:
        return tick["scheduled_at"]

    @app.workflow(name="every-second-backfill", schedule="* * * * * *", backfill=True)
    async def every_second_backfill(ctx: Any, tick: dict[str, str]) -> str:
        return tick["scheduled_at"]


def ledger_events(url: str) -> list[tuple[str, str, str, float]]:
    """(run_id, worker, event, at) of every ledger line, oldest first."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute("SELECT run_id, worker, event, at FROM biz_ledger")
            return sorted(rows, key=lambda r: r[3])
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT run_id, worker, event, EXTRACT(EPOCH FROM at)::float8 FROM biz.ledger"
        ).fetchall()
        return sorted(found, key=lambda r: r[3])


def peak(events: list[tuple[str, str, str, float]], runs: set[str]) -> int:
    """The most step bodies of `runs` in flight at once (an end at the same instant as a
    start counts first)."""
    level = top = 0
    for _, _, event, _ in sorted((e for e in events if e[0] in runs),
                                 key=lambda e: (e[3], e[2] == "start")):  # fmt: skip
        level += 1 if event == "start" else -1
        top = max(top, level)
    return top
