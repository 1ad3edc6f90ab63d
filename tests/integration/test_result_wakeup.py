"""`RunHandle.result()` learns of a run's end from a notification, not by polling its row:
the waiting client reads the run once, then waits; every waiter of an app shares one
listening connection; no end is missed, neither one that lands right after a waiter's first
read nor one announced while the listening connection was down.

Two apps on one database: `server` runs the worker, `client` only waits, and its statements
are counted (its connector's `fetch`, the one way its store reaches the database)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import psycopg
import pytest

from durably import Durably
from tests.helpers import duration, eventually, scaled

WAITERS = "durably-waiters"  # the client's application_name on PostgreSQL


def _app(url: str, undone: list[str] | None = None) -> Durably:
    app = Durably(url)
    undone = [] if undone is None else undone

    @app.workflow(name="waiter")
    async def waiter(ctx: Any, topic: str) -> Any:
        return await ctx.step.wait_for_signal(topic, timeout=duration(60))

    async def reserve() -> str:
        return "seat"

    @app.workflow(name="booking")
    async def booking(ctx: Any, topic: str) -> Any:
        await ctx.step.run("reserve", reserve, compensate=undone.append)
        return await ctx.step.wait_for_signal(topic, timeout=duration(60))

    return app


class Statements:
    """The named queries an app runs, in order."""

    def __init__(self, app: Durably, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        fetch = app.connector.fetch

        async def counted(query: str, **params: Any) -> Any:
            self.names.append(query)
            return await fetch(query, **params)

        monkeypatch.setattr(app.connector, "fetch", counted)

    def ran(self, name: str, times: int = 1) -> bool:
        """Whether query `name` ran `times` times or more."""
        return self.names.count(name) >= times


class Listens:
    """How many times an app's connector was asked to listen."""

    def __init__(self, app: Durably, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        listen = app.connector.listen

        async def counted(on_message: Any) -> Any:
            self.calls += 1
            return await listen(on_message)

        monkeypatch.setattr(app.connector, "listen", counted)


async def _all_in(app: Durably, run_ids: list[str], status: str) -> bool:
    return all([(await app.get_run(run_id)).status == status for run_id in run_ids])


async def _parked(server: Durably, topic: str, n: int = 1, workflow: str = "waiter") -> list[str]:
    """`n` runs started on `server`, each waiting for signal `topic`: their ids."""
    ids = [(await server.start(workflow, topic)).run_id for _ in range(n)]
    await eventually(lambda: _all_in(server, ids, "waiting"), what="the runs to wait")
    return ids


async def test_a_waiting_client_reads_its_run_once_then_waits_for_the_end(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = _app(db_url), _app(db_url)
    statements = Statements(client, monkeypatch)
    async with server, client, server.worker():
        [run_id] = await _parked(server, "go")
        waiting = asyncio.create_task(client.handle(run_id).result(timeout=duration(30)))
        await eventually(partial(statements.ran, "get_run"), what="the first read")
        seen = len(statements.names)
        # A window in which the run does not end, measured: a waiter that polls reads the
        # run again and again in it (the old back-off, about nine times in 600 ms).
        await asyncio.sleep(0.6)
        window = statements.names[seen:]
        # Nothing but the check of the waiters' runs made once the listener is ready (and
        # on SQLite, after a commit of the server's, if it made one).
        assert "get_run" not in window and len(window) <= 2, window
        seen = len(statements.names)
        await server.send_signal("go", "done")
        assert await waiting == "done"
        assert statements.names[seen:].count("get_run") == 1, statements.names[seen:]


async def test_an_end_right_after_the_first_read_is_not_missed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("durably._endwatch.SAFETY_POLL_S", 3600.0)  # nothing but the end
    server, client = _app(db_url), _app(db_url)
    async with server, client, server.worker():
        [run_id] = await _parked(server, "go")
        fetch = client.connector.fetch
        reads = 0

        async def end_after_first_read(query: str, **params: Any) -> Any:
            nonlocal reads
            rows = await fetch(query, **params)
            reads += query == "get_run"
            if query == "get_run" and reads == 1:  # the waiter saw the run waiting: now it ends
                await server.send_signal("go", "done")
                await eventually(lambda: _all_in(server, [run_id], "completed"), what="the end")
            return rows

        monkeypatch.setattr(client.connector, "fetch", end_after_first_read)
        assert await client.handle(run_id).result(timeout=duration(20)) == "done"
        assert reads == 2


async def test_a_cancel_wakes_the_waiter_once_the_compensations_are_done(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel ends a run at once (`cancel:<id>`), or once its compensations have run
    (`ended:<id>` from the worker): the waiter returns then, and not before."""
    monkeypatch.setattr("durably._endwatch.SAFETY_POLL_S", 3600.0)
    undone: list[str] = []
    server, client = _app(db_url, undone), _app(db_url)
    statements = Statements(client, monkeypatch)
    async with server, client, server.worker():
        [plain] = await _parked(server, "never")
        [booking] = await _parked(server, "never", workflow="booking")
        for run_id in (plain, booking):
            reads = statements.names.count("get_run")
            waiting = asyncio.create_task(client.handle(run_id).wait(timeout=duration(20)))
            await eventually(partial(statements.ran, "get_run", reads + 1), what="a first read")
            await server.cancel(run_id)
            run = await waiting
            assert run.status == "canceled" and not run.compensating
    assert undone == ["seat"]


async def test_fifty_waiters_share_one_listening_connection(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    postgres = not db_url.startswith("sqlite")
    server = _app(db_url)
    client = _app(f"{db_url}?application_name={WAITERS}" if postgres else db_url)
    statements, listens = Statements(client, monkeypatch), Listens(client, monkeypatch)
    async with server, client, server.worker(concurrency=10):
        ids = await _parked(server, "all", 50)
        waiting = [
            asyncio.create_task(client.handle(run_id).result(timeout=duration(60)))
            for run_id in ids
        ]
        await eventually(partial(statements.ran, "get_run", 50), what="50 first reads")
        assert listens.calls == 1
        if postgres:
            assert await _listening_backends(db_url) == 1
        sent = await server.send_signal("all", "done")
        assert sorted(sent["delivered_to"]) == sorted(ids)
        assert await asyncio.gather(*waiting) == ["done"] * 50
        assert listens.calls == 1


async def _listening_backends(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND query LIKE 'LISTEN%%'",
            (WAITERS,),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_waiters_return_after_their_listening_connection_was_killed(
    pg_url: str, fault_proxy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listening connection is terminated, and cannot come back (the proxy refuses new
    connections) while the runs end: their notifications are lost. The reconnect makes up
    for them; the slow safety poll is out of the picture."""
    monkeypatch.setattr("durably._endwatch.SAFETY_POLL_S", 3600.0)
    server = _app(pg_url)
    client = _app(f"{fault_proxy.url_for(pg_url)}?application_name={WAITERS}")
    statements = Statements(client, monkeypatch)
    async with server, client, server.worker():
        ids = await _parked(server, "go", 3)
        waiting = [
            asyncio.create_task(client.handle(run_id).result(timeout=duration(60)))
            for run_id in ids
        ]
        await eventually(partial(statements.ran, "get_run", 3), what="three first reads")
        await eventually(lambda: _listening_backends(pg_url), what="the client to listen")
        fault_proxy.refuse()
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND query LIKE 'LISTEN%%'",
                (WAITERS,),
            )
            assert await cur.fetchone() == (1,)
        await server.send_signal("go", "done")
        await eventually(lambda: _all_in(server, ids, "completed"), what="the runs to end")
        assert not any(task.done() for task in waiting)  # nothing told them yet
        fault_proxy.refuse(False)
        async with asyncio.timeout(scaled(20)):
            assert await asyncio.gather(*waiting) == ["done"] * 3


async def test_the_sync_facade_waits_for_the_end_too(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = _app(db_url), _app(db_url)
    statements = Statements(client, monkeypatch)
    async with server, server.worker():
        [run_id] = await _parked(server, "go")
        waiting = asyncio.create_task(asyncio.to_thread(client.sync.result, run_id, scaled(30)))
        await eventually(partial(statements.ran, "get_run"), what="the first read")
        await server.send_signal("go", "done")
        assert await waiting == "done"
        await asyncio.to_thread(client.sync.close)
