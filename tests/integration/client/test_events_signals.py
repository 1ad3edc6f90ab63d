"""Events (§4.18) and signal housekeeping, on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from durably import Durably, RunNotFound, SignalNotFound
from durably.backends.postgres import transactions
from durably.backends.postgres.connector import CONFLICT_TRIES
from durably.core.errors import DatabaseConflict
from tests.helpers import duration, eventually, scaled
from tests.integration.client.test_result_wakeup import listening_backends


async def test_events_are_durable_latest_wins_and_wake_a_waiting_reader(db_url: str) -> None:
    app = Durably(db_url)
    bodies: list[int] = []

    @app.workflow(name="progress", version="v1")
    async def progress(ctx: Any) -> str:
        await ctx.step.set_event("progress", {"done": 0})
        await ctx.step.run("work", bodies.append, 1)
        await ctx.step.set_event("progress", {"done": 1})
        await ctx.step.wait_for_signal("finish", timeout=duration(30))
        await ctx.step.set_event("progress", {"done": 2})
        return "ok"

    async with app:
        handle = await progress.start()
        assert await app.get_event(handle.run_id, "progress", timeout=duration(0.2)) is None
        reader = asyncio.create_task(app.get_event(handle.run_id, "progress", timeout=scaled(10)))
        async with app.worker():
            assert (await reader) in ({"done": 0}, {"done": 1})  # woken by the first
            await eventually(lambda: _waiting(app, handle.run_id), what="the signal wait")
            assert await app.get_event(handle.run_id, "progress") == {"done": 1}
            await app.send_signal("finish")
            assert await handle.result(timeout=scaled(10)) == "ok"
        assert await app.get_event(handle.run_id, "progress", timeout=0) == {"done": 2}
        assert await app.list_events(handle.run_id) == {"progress": {"done": 2}}
        steps = [(s.step, s.kind) for s in await app.list_steps(handle.run_id)]
        assert steps.count(("progress", "event")) == 3  # replays wrote nothing again
        assert bodies == [1]
        with pytest.raises(RunNotFound):
            await app.get_event("nope", "progress")


async def _waiting(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting"


async def test_list_delete_and_expire_buffered_signals(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="waiter", version="v1")
    async def waiter(ctx: Any, topic: str) -> Any:
        return await ctx.step.wait_for_signal(topic, timeout=duration(1))

    async with app:
        await app.send_signal("stale", 1, expires="1ms")
        kept = await app.send_signal("kept", 2, expires="1 day")
        assert kept == {"delivered_to": [], "buffered": True, "duplicate": False}
        await app.send_signal("typo", 3)
        pending = await app.list_signals()
        assert [(s["name"], s["data"]) for s in pending] == [("kept", 2), ("typo", 3)]
        assert set(pending[0]) == {"id", "name", "data", "created_at", "expires_at",
                                   "consumed_by"}  # fmt: skip
        assert pending[0]["expires_at"] is not None and pending[1]["expires_at"] is None
        assert [s["name"] for s in await app.list_signals(pending=False)] == [
            "stale", "kept", "typo"]  # fmt: skip
        assert [s["name"] for s in await app.list_signals(name="typo")] == ["typo"]

        await app.delete_signal(pending[1]["id"])
        with pytest.raises(SignalNotFound):
            await app.delete_signal(pending[1]["id"])
        assert [s["name"] for s in await app.list_signals()] == ["kept"]

        async with app.worker():
            stale, got = await waiter.start("stale"), await waiter.start("kept")
            assert await got.result(timeout=scaled(10)) == 2
            assert await stale.result(timeout=scaled(10)) is None  # expired: never delivered
        consumed = await app.list_signals(name="kept", pending=False)
        assert consumed[0]["consumed_by"] == got.run_id
        assert await app.list_signals() == []


async def test_a_signal_sent_by_a_step_expires_too(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="sender", version="v1")
    async def sender(ctx: Any) -> None:
        await ctx.step.send_signal("soon-stale", 1, expires="1ms")
        await ctx.step.send_signal("lasting", 2, expires="1 day")

    @app.workflow(name="waiter", version="v1")
    async def waiter(ctx: Any, topic: str) -> Any:
        return await ctx.step.wait_for_signal(topic, timeout=duration(1))

    async with app, app.worker():
        await (await sender.start()).result(timeout=scaled(10))
        [lasting] = await app.list_signals()  # the expired one is no longer pending
        assert lasting["name"] == "lasting" and lasting["expires_at"] is not None
        stale = await waiter.start("soon-stale")
        assert await stale.result(timeout=scaled(10)) is None  # expired: never delivered


async def test_readers_waiting_for_events_share_the_apps_listening_connection(
    pg_url: str,
) -> None:
    """Each `get_event` that had to wait opened a listening connection of its own: twenty
    readers held twenty connections of the server's."""
    name = "event-readers"
    app = Durably(f"{pg_url}?application_name={name}")

    @app.workflow(name="slow-progress", version="v1")
    async def slow_progress(ctx: Any) -> str:
        await ctx.step.wait_for_signal("go", timeout=duration(60))
        await ctx.step.set_event("progress", {"done": 1})
        return "ok"

    async with app:
        handle = await slow_progress.start()
        readers = [
            asyncio.create_task(app.get_event(handle.run_id, "progress", timeout=duration(30)))
            for _ in range(20)
        ]
        await eventually(lambda: _one_listening(pg_url, name), what="the readers to listen")
        assert await listening_backends(pg_url, name) == 1
        async with app.worker():
            await app.send_signal("go")
            assert await asyncio.gather(*readers) == [{"done": 1}] * 20
            assert await handle.result(timeout=scaled(10)) == "ok"


async def _one_listening(url: str, application_name: str) -> bool:
    return await listening_backends(url, application_name) == 1


async def test_a_wait_begun_while_a_send_waits_for_the_names_lock_receives_it(
    pg_url: str,
) -> None:
    """PostgreSQL: a send is one statement that takes the signal name's lock, then reads who
    waits. The run's wait begins under that lock first (the test holds it until both wait
    for it, the wait ahead): the send must read the wait it committed, not a snapshot from
    before its lock (the signal would be buffered, and the wait would see nothing)."""
    app = Durably(pg_url)

    @app.workflow(name="waits", version="v1")
    async def waits(ctx: Any) -> Any:
        return await ctx.step.wait_for_signal("go", timeout=duration(60))

    async with app, await psycopg.AsyncConnection.connect(pg_url) as holder:
        handle = await waits.start()
        await holder.execute("SELECT pg_advisory_xact_lock(hashtext('default/go'))")
        async with app.worker():
            await eventually(lambda: _lock_waiters(pg_url, 1), what="the wait to begin")
            send = asyncio.create_task(app.send_signal("go", "y"))
            await eventually(lambda: _lock_waiters(pg_url, 2, unless=send.done()), what="the send")
            await holder.commit()
            assert (await send)["delivered_to"] == [handle.run_id]
            assert await handle.result(timeout=scaled(10)) == "y"


@pytest.mark.parametrize("send_as", ["plain", "keyed", "addressed"])
async def test_a_send_waits_for_the_names_lock_past_the_statement_deadline(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, send_as: str
) -> None:
    """PostgreSQL: a send behind a transaction that holds its name's lock (a caller's own
    `send_signal(connection=...)`, still open) waits for it, however long: the engine's
    statement deadline (1 s here) would fail a send the database is about to serve, and
    could fire once it had committed (a sent signal reported failed). With an idempotency
    key or a run addressed, what the send looks up first waits for the lock."""
    monkeypatch.setattr(transactions, "STATEMENT_S", 1.0)
    app = Durably(pg_url)

    @app.workflow(name="addressed", version="v1")
    async def addressed(ctx: Any) -> None:
        return None

    async with app, await psycopg.AsyncConnection.connect(pg_url) as holder:
        await app.migrate()
        run_id = (await addressed.start()).run_id if send_as == "addressed" else None
        key = "k1" if send_as == "keyed" else None
        await holder.execute("SELECT pg_advisory_xact_lock(hashtext('default/go'))")
        send = asyncio.create_task(app.send_signal("go", "y", idempotency_key=key, run_id=run_id))
        await eventually(lambda: _lock_waiters(pg_url, 1), what="the send")
        deadline = asyncio.get_running_loop().time() + 1.5  # past the statement deadline
        await eventually(lambda: _past(deadline, send), what="the deadline to pass")
        await holder.commit()
        assert (await send)["buffered"]


async def _past(deadline: float, send: asyncio.Task[Any]) -> bool:
    return send.done() or asyncio.get_running_loop().time() >= deadline


async def test_a_send_aborted_as_a_deadlock_is_tried_conflict_tries_times_in_all(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: a send that keeps losing deadlocks is run CONFLICT_TRIES times in all, not
    CONFLICT_TRIES times by the connector within each of CONFLICT_TRIES runs of the store's
    (the deadlock is raised where the driver would raise it)."""
    calls = 0
    real = transactions.PgTx.fetch

    async def deadlocking(self: Any, query: str, **params: Any) -> Any:
        nonlocal calls
        if query == "send_signal":
            calls += 1
            raise psycopg.errors.DeadlockDetected("deadlock detected (test)")
        return await real(self, query, **params)

    monkeypatch.setattr(transactions.PgTx, "fetch", deadlocking)
    app = Durably(pg_url)
    async with app:
        with pytest.raises(DatabaseConflict):
            await app.send_signal("go", "y")
    assert calls == CONFLICT_TRIES


async def _lock_waiters(url: str, n: int, unless: bool = False) -> bool:
    """Whether `n` sessions of the database wait for an advisory lock (or `unless`)."""
    if unless:
        return True
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE d.datname = current_database() AND l.locktype = 'advisory' "
            "AND NOT l.granted"
        )
        row = await cur.fetchone()
    return row is not None and row[0] == n
