"""Sends, records and claims at once (PostgreSQL): sends that wake the same runs at once
wait for each other, none is aborted as a deadlock (deadlock_timeout, a second by default,
before one of them is aborted and sent again); what is committed for a run while its claim
is under way (a signal, the previous holder's last record) is in the history that claim
hands its execution.

A claim is held between its snapshot and its lock on a run by a lock on the row of the
run's queue, which no worker declares: the claim reads those rows first and takes their
runs as unqueued ones."""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from durably import Durably
from durably.store.records import Lease, PendingStep
from tests.helpers import duration, eventually, scaled
from tests.integration.execution.test_signals_between_attempts import (
    _HOLD_WAIT_END,
    SEND,
    _waiting,
    retried_beside_a_wait,
)

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
    delivered, parked, and the run stayed `waiting` until the wait's time-out."""

    async def two(ctx: Any) -> list[Any]:
        return list(await ctx.gather(
            ctx.step.wait_for_signal("a", timeout=duration(60)),
            ctx.step.wait_for_signal("b", timeout=duration(60)),
        ))  # fmt: skip

    starter, worker_app = _apps(pg_url, two)
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


@pytest.mark.parametrize("written", ["record", "start"])
async def test_what_the_previous_holder_commits_while_the_claim_is_under_way_is_seen(
    pg_url: str, written: str
) -> None:
    """The run's previous holder writes while its lease still holds and commits just after
    the lease ran out, as the next claim is under way. Its step's record: the step
    completed, and must not run again. Its attempt's start: the attempt is abandoned, as
    the claim abandons the others, not left `running` beside the next one (review)."""
    ran: list[int] = []

    async def once(k: int) -> int:
        ran.append(k)
        return k

    async def flow(ctx: Any) -> int:
        return int(await ctx.step.run("once", once, 1))

    starter, worker_app = _apps(pg_url, flow)
    async with starter, worker_app, await psycopg.AsyncConnection.connect(pg_url) as holder:
        handle = await starter.start("flow")
        store = worker_app.store
        [row] = await store.claim("old", [("flow", "v1")], 1, scaled(1))
        lease = Lease(row["id"], row["fence"], "old", row["attempts"])
        record = PendingStep(1, 1, "once", "function", "completed", output_json="1", seq=1)
        async with store.db.transaction() as tx:  # the old holder's write, not committed
            if written == "record":
                batch = f"[{record.batch_entry(lease)}]"
                assert await tx.fetch("record_many", worker_id="old", batch=batch)
            else:
                await store.steps.record_start(lease, 1, 1, "once", "function", tx=tx)
            await eventually(lambda: _lapsed(starter, handle.run_id), what="the lease to end")
            await holder.execute("SELECT 1 FROM durably.queues WHERE name = 'nobody' FOR UPDATE")
            worker = worker_app.worker()
            await worker.__aenter__()
            try:
                await eventually(lambda: _claim_blocked(pg_url), what="the claim to wait")
            except BaseException:
                await worker.__aexit__(None, None, None)
                raise
        try:  # the write is committed; the claim goes on
            await holder.rollback()
            assert await handle.result(timeout=scaled(10)) == 1
        finally:
            await worker.__aexit__(None, None, None)
        attempts = [(s.attempt, s.status) for s in await starter.list_steps(handle.run_id)]
    if written == "record":
        assert ran == [] and attempts == [(1, "completed")]
    else:
        assert ran == [1] and attempts == [(1, "abandoned"), (2, "completed")]


def _apps(url: str, fn: Any) -> tuple[Durably, Durably]:
    """An app whose runs of `fn` go to queue "nobody", and a worker's app that serves the
    same workflow without a queue: no worker declares "nobody"."""
    starter, worker_app = Durably(url), Durably(url)
    name = fn.__name__
    starter.workflow(name=name, version="v1", queue=starter.queue("nobody"))(fn)
    worker_app.workflow(name=name, version="v1")(fn)
    return starter, worker_app


async def _lapsed(app: Durably, run_id: str) -> bool:
    run = await app.get_run(run_id)
    return run.available_at is not None and run.available_at <= datetime.now(UTC)


async def test_an_addressed_send_as_a_workflow_retry_ends_its_waits_does_not_deadlock(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A workflow retry ends the failed attempt's waits, then updates the run; an addressed
    send locked the run, then a wait: each waited for the other (review). The retry's
    transaction is held, once it has ended the wait, by a trigger waiting for a lock the
    test holds, until the send waits too."""
    app = Durably(pg_url)
    fails = retried_beside_a_wait(app, duration(60))

    caplog.set_level(logging.INFO)
    async with app, await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        handle = await fails.start()
        await conn.execute(_HOLD_WAIT_END)
        await conn.execute("SELECT pg_advisory_lock(8128, 1)")
        async with app.worker():
            await eventually(lambda: _waiting(conn, "advisory"), what="the wait's end")
            send = asyncio.create_task(app.send_signal("go", "y", run_id=handle.run_id))
            await eventually(lambda: _send_waits(conn), what="the send to wait")
            await conn.execute("SELECT pg_advisory_unlock(8128, 1)")
            await send
            assert await handle.result(timeout=scaled(10)) == "y"
    aborted = [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()]
    assert aborted == []


async def _send_waits(conn: psycopg.AsyncConnection[Any]) -> bool:
    return await _waiting(conn, "SELECT * FROM") or await _waiting(conn, SEND)
