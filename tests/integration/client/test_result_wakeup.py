"""`RunHandle.result()` learns of a run's end from a notification, not by polling its row:
the waiting client reads the run once, then waits; every waiter of an app shares one
listening connection; no end is missed, neither one that lands right after a waiter's first
read nor one announced while the listening connection was down.

Two apps on one database: `server` runs the worker, `client` only waits, and its statements
are counted (its connector's `fetch`, the one way its store reaches the database)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg import sql

from durably import Durably, RetryPolicy, WorkflowTimeoutError
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

    @app.workflow(name="quick")
    async def quick(ctx: Any, x: int) -> int:
        return x

    @app.workflow(name="parent")  # ends with a child: by finish_run, not group commit
    async def parent(ctx: Any, topic: str) -> Any:
        await ctx.step.run_workflow(quick, 1)
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


@contextlib.asynccontextmanager
async def _cancelled_after(task: asyncio.Task[None]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_only_the_ends_someone_waits_for_are_notified(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every listener of the channel (each worker's) hears every `ended:`, and PostgreSQL
    serializes the commits of notifying transactions: the end of a run nobody waits for
    (almost every end) sends none. Heard by a plain connection listening on the channel."""
    server, client = _app(pg_url), _app(pg_url)
    statements = Statements(client, monkeypatch)
    heard: list[str] = []
    async with (
        server, client,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn,
    ):  # fmt: skip
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(server.store.channel)))

        async def hear() -> None:
            async for note in conn.notifies():
                heard.append(note.payload)

        hearing = asyncio.create_task(hear())
        async with server.worker(concurrency=10), _cancelled_after(hearing):
            # Nobody waits: 20 runs ended by group commit, 3 parents ended each with its
            # child's end behind it (by finish_run).
            quick = [(await server.start("quick", i)).run_id for i in range(20)]
            parents = await _parked(server, "nobody", 3, workflow="parent")
            awaited = await _parked(server, "go")
            awaited += await _parked(server, "go", workflow="parent")
            await eventually(lambda: _all_in(server, quick, "completed"), what="quick runs")
            await server.send_signal("nobody", "done")
            await eventually(lambda: _all_in(server, parents, "completed"), what="the parents")
            waiting = [
                asyncio.create_task(client.handle(run_id).result(timeout=duration(30)))
                for run_id in awaited
            ]
            await eventually(partial(statements.ran, "get_run", 2), what="the first reads")
            await server.send_signal("go", "done")
            assert await asyncio.gather(*waiting) == ["done"] * 2
            # Notifications reach a listener in commit order: those of the ends before the
            # awaited ones are in by now.
            await eventually(lambda: {f"ended:{i}" for i in awaited} <= set(heard),
                             what="the awaited ends' notifications")  # fmt: skip
    ended = sorted(m.removeprefix("ended:") for m in heard if m.startswith("ended:"))
    assert ended == sorted(awaited), f"{len(ended)} ends notified, {len(awaited)} awaited"


async def test_a_run_a_claim_passed_over_while_it_was_marked_is_claimed_at_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiter's mark holds its run's row lock for a moment, and a claim that comes then
    passes over the run (SKIP LOCKED). A busy worker looks for work again only when told
    (or after its poll interval): the mark of a due run tells the workers. Here the mark
    holds the lock until a claim has passed over the run (before, about a third of
    start-then-result calls beside a busy worker lost the 5 s poll interval so)."""
    server, client = _app(pg_url), _app(pg_url)
    release = asyncio.Event()

    @server.workflow(name="hold")
    async def hold(ctx: Any) -> None:  # keeps the worker busy: no look for work when idle
        await ctx.step.run("hold", release.wait)

    marking, passed = asyncio.Event(), asyncio.Event()
    claim, mark = server.connector.fetch, client.connector.fetch

    async def claim_while_marking(query: str, **params: Any) -> Any:
        if query != "claim" or passed.is_set():
            return await claim(query, **params)
        await marking.wait()
        rows = await claim(query, **params)
        passed.set()
        return rows

    async def mark_across_a_claim(query: str, **params: Any) -> Any:
        if query != "await_runs":
            return await mark(query, **params)
        async with client.connector.transaction() as tx:
            rows = await tx.fetch(query, **params)
            marking.set()
            await passed.wait()
        return rows

    monkeypatch.setattr(client.connector, "fetch", mark_across_a_claim)
    async with server, client, server.worker(concurrency=10, poll_interval="60s"):
        held = await server.start("hold")
        await eventually(lambda: _all_in(server, [held.run_id], "running"), what="a busy worker")
        monkeypatch.setattr(server.connector, "fetch", claim_while_marking)
        try:
            run_id = (await server.start("quick", 7)).run_id
            assert await client.handle(run_id).result(timeout=duration(10)) == 7
            assert passed.is_set()
        finally:
            release.set()


async def test_a_run_resumed_between_the_mark_and_the_read_is_marked_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark finds the run ended (failed); it is resumed before the waiter reads it,
    and the read finds it live: the waiter marks it again before it waits, so the end of
    the resumed run is told (the safety poll is out of the picture)."""
    monkeypatch.setattr("durably.store.endwatch.SAFETY_POLL_S", 3600.0)
    server, client = _app(pg_url), _app(pg_url)
    calls: list[int] = []

    def fails_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first time")
        return "ok"

    @server.workflow(name="resumed")
    async def resumed(ctx: Any) -> Any:
        await ctx.step.run("once", fails_once, retry=RetryPolicy(max_attempts=1))
        return await ctx.step.wait_for_signal("go", timeout=duration(60))

    marks: list[list[str]] = []
    mark = client.connector.fetch

    async def resume_after_the_first_mark(query: str, **params: Any) -> Any:
        rows = await mark(query, **params)
        if query == "await_runs":
            marks.append([row["id"] for row in rows])
            if len(marks) == 1:
                await server.resume(params["ids"][0])
        return rows

    async with server, client, server.worker():
        run_id = (await server.start("resumed")).run_id
        await eventually(lambda: _all_in(server, [run_id], "failed"), what="the failure")
        monkeypatch.setattr(client.connector, "fetch", resume_after_the_first_mark)
        waiting = asyncio.create_task(client.handle(run_id).result(timeout=duration(60)))
        await eventually(lambda: _all_in(server, [run_id], "waiting"), what="the resumed run")
        await server.send_signal("go", "done")
        async with asyncio.timeout(scaled(10)):  # told of the end, not at the result's timeout
            assert await waiting == "done"
    # Marked again (or, if the end came first, found ended again, and read).
    assert len(marks) == 2 and marks[0] == [], marks


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
    monkeypatch.setattr("durably.store.endwatch.SAFETY_POLL_S", 3600.0)  # nothing but the end
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
    monkeypatch.setattr("durably.store.endwatch.SAFETY_POLL_S", 3600.0)
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
            assert await listening_backends(db_url) == 1
            # Their runs were marked awaited together (by as many statements as times
            # the marks went out): not one statement each.
            assert statements.names.count("await_runs") <= 3, statements.names
        sent = await server.send_signal("all", "done")
        assert sorted(sent["delivered_to"]) == sorted(ids)
        assert await asyncio.gather(*waiting) == ["done"] * 50
        assert listens.calls == 1


async def listening_backends(url: str, application_name: str = WAITERS) -> int:
    """The server's backends of `application_name` that listen."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND query LIKE 'LISTEN%%'",
            (application_name,),
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
    monkeypatch.setattr("durably.store.endwatch.SAFETY_POLL_S", 3600.0)
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
        await eventually(lambda: listening_backends(pg_url), what="the client to listen")
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


async def test_a_result_timing_out_at_once_leaves_later_waits_working(db_url: str) -> None:
    """The first wait of an app starts the app's listener: a wait whose timeout expires
    while that start is awaited (1 µs) gives up alone; later waits, and close, still work
    (the shared start was cancelled with it, and every later wait raised CancelledError)."""
    app = Durably(db_url)

    @app.workflow(name="never-run", version="v1")
    async def never_run(ctx: Any) -> int:
        return 1

    async with app:
        handle = await never_run.start()  # no worker: it stays pending
        with pytest.raises(WorkflowTimeoutError):
            await handle.result(timeout=1e-6)
        with pytest.raises(WorkflowTimeoutError):
            await handle.result(timeout=0.2)
