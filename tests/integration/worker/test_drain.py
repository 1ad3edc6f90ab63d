"""A draining worker lets a run go only once nothing of it is left to record: a sync body
it kept running (a thread cannot be interrupted) has its outcome recorded before the run
is released, however long after the drain's halt the body returns."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from durably import Durably
from durably.execution import lifecycles as _lifecycles
from tests.helpers import eventually, scaled


def _waiting_on_locks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
        return int(row[0]) if row else 0


def _steps(url: str, run_id: str) -> list[tuple[str, int, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT step, attempt, status FROM durably.step_attempts WHERE run_id = %s"
            " ORDER BY id", (run_id,),
        ).fetchall()  # fmt: skip
    return [(r[0], r[1], r[2]) for r in rows]


def _owned(url: str, run_id: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT worker_id FROM durably.runs WHERE id = %s",
                           (run_id,)).fetchone()  # fmt: skip
    return row is not None and row[0] is not None


async def test_a_kept_sync_body_is_recorded_before_its_run_is_released(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body returns after the drain's settle time, while the worker's step recorder
    has both its statements in flight: held, from outside, by a client that locks the rows
    of the worker's two other runs. The kept run's record queues behind them; the run must
    not be released (and its body claimed and run again) before it is written."""
    settle = scaled(0.5)
    monkeypatch.setattr(_lifecycles, "SETTLE_S", settle)
    app = Durably(pg_url)
    started = {name: threading.Event() for name in ("kept", "o1", "o2")}
    go = {name: threading.Event() for name in started}
    ran: list[str] = []

    def body(name: str) -> str:
        started[name].set()
        go[name].wait(scaled(60))
        ran.append(name)
        return name

    @app.workflow(name="kept", version="v1")
    async def kept(ctx: Any) -> str:
        result: str = await ctx.step.run("slow", body, "kept")
        return result

    @app.workflow(name="other", version="v1")
    async def other(ctx: Any, name: str) -> None:
        await ctx.step.run("o", body, name)
        await ctx.step.run("after", lambda: None)

    async with app:
        worker = app.worker(concurrency=3, lease="120s", heartbeat="60s",
                            shutdown_grace="0.2s")  # fmt: skip
        k = await kept.start()
        o1, o2 = await other.start("o1"), await other.start("o2")
        running = asyncio.create_task(worker.run(install_signals=False))
        await eventually(lambda: all(e.is_set() for e in started.values()),
                         what="the three bodies running")  # fmt: skip
        locker = await psycopg.AsyncConnection.connect(pg_url)
        try:
            await locker.execute("SELECT 1 FROM durably.runs WHERE id = ANY(%s) FOR UPDATE",
                                 ([o1.run_id, o2.run_id],))  # fmt: skip
            go["o1"].set()
            await eventually(lambda: _waiting_on_locks(pg_url) >= 1, what="o1's record blocked")
            go["o2"].set()
            await eventually(lambda: _waiting_on_locks(pg_url) >= 2, what="o2's record blocked")
            worker.stop()  # the drain: after its grace, every run is halted with a release
            # Not a wait for a condition: the defect needs the body to return after the
            # drain's settle time has run out.
            await asyncio.sleep(0.2 + 2 * settle)
            assert _owned(pg_url, k.run_id)
            go["kept"].set()
            await eventually(lambda: ran.count("kept") == 1, what="the kept body to return")
        finally:
            await locker.rollback()
            await locker.close()
        await asyncio.wait_for(running, scaled(30))
        async with app.worker(lease="5s", heartbeat="1s"):
            assert await k.result(timeout=scaled(20)) == "kept"
    assert ran.count("kept") == 1, ran  # the sync body ran once
    assert ("slow", 1, "completed") in _steps(pg_url, k.run_id)
