"""Sends and claims at once (§4.3, PostgreSQL): sends that wake the same runs at once wait
for each other, none is aborted as a deadlock (deadlock_timeout, a second by default,
before one of them is aborted and sent again); a signal delivered while its run's claim
is under way is never missed by the execution that claim starts."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import psycopg
import pytest

from durably import Durably
from tests.helpers import duration, eventually, scaled

RUNS = 6


async def test_sends_that_wake_the_same_runs_at_once_never_deadlock(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each run waits for two signals at once; both are sent to each run at the same time
    (addressed), and both names are also broadcast to all the runs at once."""
    app = Durably(pg_url)

    @app.workflow(name="two", version="v1")
    async def two(ctx: Any, k: int) -> list[Any]:
        return list(await ctx.gather(
            ctx.step.wait_for_signal("a", timeout=duration(60)),
            ctx.step.wait_for_signal("b", timeout=duration(60)),
        ))  # fmt: skip

    caplog.set_level(logging.INFO, logger="durably.postgres")
    async with app:
        for rounds in ("addressed", "broadcast"):
            handles = [await two.start(k) for k in range(RUNS)]
            async with app.worker(concurrency=RUNS):
                for h in handles:
                    await eventually(functools.partial(_waits, app, h.run_id, 2),
                                     what="both waits")  # fmt: skip
                if rounds == "addressed":
                    await asyncio.gather(*(app.send_signal(name, name, run_id=h.run_id)
                                           for h in handles for name in ("a", "b")))  # fmt: skip
                else:
                    await asyncio.gather(app.send_signal("a", "a"), app.send_signal("b", "b"))
                for h in handles:
                    assert await h.result(timeout=scaled(20)) == ["a", "b"]
    retried = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert retried == []


async def _waits(app: Durably, run_id: str, n: int) -> bool:
    steps = await app.list_steps(run_id)
    return sum(s.kind == "signal-wait" and s.status == "running" for s in steps) == n


async def test_a_signal_delivered_while_the_claim_is_under_way_is_received(pg_url: str) -> None:
    """The claim reads the run's history with the snapshot it started with, and locks the
    run as it finds it later. A second signal committed in between (the run already woken
    by the first, not yet claimed) is not in that history, and the send found the run
    `pending`, so it asked nobody to look again: the execution waited for a signal already
    delivered, parked, and the run stayed `waiting` until the wait's time-out.

    The claim is held between its snapshot and its lock on the run by a lock on the row of
    the run's queue, which no worker declares (the claim reads those rows first)."""
    starter, worker_app = Durably(pg_url), Durably(pg_url)

    async def two(ctx: Any) -> list[Any]:
        return list(await ctx.gather(
            ctx.step.wait_for_signal("a", timeout=duration(60)),
            ctx.step.wait_for_signal("b", timeout=duration(60)),
        ))  # fmt: skip

    starter.workflow(name="two", version="v1", queue=starter.queue("nobody"))(two)
    worker_app.workflow(name="two", version="v1")(two)  # the queue's runs, as unqueued ones
    async with (
        starter,
        worker_app,
        await psycopg.AsyncConnection.connect(pg_url) as holder,
        worker_app.worker(),
    ):
        handle = await starter.start("two")
        await eventually(lambda: _parked(starter, handle.run_id), what="the run to park")
        await holder.execute("SELECT 1 FROM durably.queues WHERE name = 'nobody' FOR UPDATE")
        await starter.send_signal("a", "a")
        await eventually(lambda: _claim_blocked(pg_url), what="the claim to wait")
        await starter.send_signal("b", "b")
        await holder.rollback()
        assert await handle.result(timeout=scaled(10)) == ["a", "b"]


async def _parked(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting" and await _waits(app, run_id, 2)


async def _claim_blocked(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE '%lapsed%'"
        )
        row = await cur.fetchone()
        return row is not None and row[0] > 0
