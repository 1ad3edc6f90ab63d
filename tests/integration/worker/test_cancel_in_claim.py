"""A cancel whose notification reaches the worker while the claim of its run is still on
its way back (PostgreSQL): the worker does not execute that run yet, so the notification
finds nothing to halt. The run's first body must still be interrupted at once (§4.5), not
at the next heartbeat, which here is a minute away.

The worker reaches the server through the fault proxy, which holds the replies of the
connection the claimed run's row was sent on: the claim has committed, its worker has not
heard of it, while a client cancels the run directly."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from durably import Durably
from tests.faults import FaultProxy
from tests.helpers import eventually, scaled

NAME = "cancel-in-claim-window"


def _apps(pg_url: str, proxy: FaultProxy) -> tuple[Durably, Durably, Any, dict[str, asyncio.Event]]:
    worker_app, client = Durably(proxy.url_for(pg_url)), Durably(pg_url)
    seen = {"started": asyncio.Event(), "interrupted": asyncio.Event()}

    async def wait_for_ever() -> None:
        seen["started"].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen["interrupted"].set()
            raise

    async def flow(ctx: Any) -> None:
        await ctx.step.run("forever", wait_for_ever)

    worker_app.workflow(name=NAME, version="v1")(flow)
    return worker_app, client, client.workflow(name=NAME, version="v1")(flow), seen


async def test_a_cancel_notified_before_the_claim_returns_interrupts_the_first_body(
    pg_url: str, fault_proxy: FaultProxy
) -> None:
    worker_app, client, wf, seen = _apps(pg_url, fault_proxy)
    async with worker_app, client:
        worker = worker_app.worker(lease="180s", heartbeat="60s", poll_interval="60s")
        async with worker:
            await eventually(lambda: _listening(pg_url), what="the worker to listen")
            fault_proxy.hold_replies(NAME.encode())
            handle = await wf.start()
            await eventually(lambda: fault_proxy.holding, what="the claim's reply held")
            run = await client.get_run(handle.run_id)
            assert run.status == "running"  # claimed, and its worker does not know it yet
            await client.cancel(handle.run_id)
            note = f"cancel:{handle.run_id}"
            await eventually(lambda: note in fault_proxy.notifications, what="the notification")
            await eventually(fault_proxy.delivered, what="the worker to read it")
            fault_proxy.release()
            await asyncio.wait_for(seen["started"].wait(), scaled(10))
            try:
                await asyncio.wait_for(seen["interrupted"].wait(), scaled(10))
            except TimeoutError:
                pytest.fail("the body ran on past the cancel (until the next heartbeat)")
            await eventually(lambda: _ended(client, handle.run_id), what="the run to end")


async def _ended(app: Durably, run_id: str) -> bool:
    run = await app.get_run(run_id)
    return run.status == "canceled" and run.finished_at is not None


async def _listening(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        )
        row = await cur.fetchone()
    return row is not None and row[0] > 0
