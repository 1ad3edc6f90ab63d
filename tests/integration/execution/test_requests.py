"""Requests with answers (SPEC §4.22) on both backends: `app.request` delivers to a run's
`ctx.step.wait_for_request` (buffered FIFO when sent before the wait) and returns the
`reply`, or raises `RequestRejected` for a `reject`; a request nobody answers in time
raises `WorkflowTimeoutError` and its later answer is kept for `get_reply`; a finished or
unknown run is refused; an idempotency key delivers once; a replay never replies again."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from functools import partial
from typing import Any

import psycopg
import pytest

from durably import (
    Durably,
    FernetCodec,
    InvalidInput,
    Request,
    RequestRejected,
    RunHandle,
    RunNotFound,
    RunTerminalError,
    SyncWorkflowContext,
    WorkflowContext,
    WorkflowTimeoutError,
)
from durably.testing import replay
from tests.helpers import duration, eventually, scaled


def _app(url: str) -> Durably:
    app = Durably(url)

    @app.workflow(name="answer", version="v1")
    async def answer(ctx: WorkflowContext, count: int) -> list[Any]:
        """Answer `count` requests "ask" in order: double the data, reject a negative one."""
        seen = []
        for _ in range(count):
            req = await ctx.step.wait_for_request("ask")
            assert isinstance(req, Request)
            seen.append(req.data)
            if req.data < 0:
                await ctx.step.reject(req, f"{req.data} is negative")
            else:
                await ctx.step.reply(req, req.data * 2)
        await ctx.step.wait_for_signal(f"end:{ctx.run_id}")  # parks: the next claim replays
        return seen

    @app.workflow(name="answer-sync", version="v1")
    def answer_sync(ctx: SyncWorkflowContext, count: int) -> list[Any]:
        seen = []
        for _ in range(count):
            req = ctx.step.wait_for_request("ask")
            assert req is not None
            seen.append(req.data)
            ctx.step.reply(req, req.data * 2)
        return seen

    @app.workflow(name="slow", version="v1")
    async def slow(ctx: WorkflowContext) -> str:
        req = await ctx.step.wait_for_request("ask")
        assert req is not None
        await ctx.step.wait_for_signal(f"go:{ctx.run_id}")  # the client gives up first
        await ctx.step.reply(req, "late")
        return "done"

    @app.workflow(name="timeout", version="v1")
    async def timeout(ctx: WorkflowContext) -> str:
        req = await ctx.step.wait_for_request("ask", timeout="50ms")
        return "none" if req is None else "got"

    return app


async def _waiting(handle: RunHandle[Any], label: str) -> None:
    async def check() -> bool:
        run = await handle.get()
        return run.status == "waiting" and run.waiting_for == label

    await eventually(check, what=f"run {handle.run_id} waiting for {label}")


async def test_reply_and_reject(db_url: str) -> None:
    app = _app(db_url)
    async with app, app.worker():
        handle = await app.start("answer", 2)
        assert await app.request(handle.run_id, "ask", 21, timeout=scaled(20)) == 42
        with pytest.raises(RequestRejected) as rejected:
            await app.request(handle.run_id, "ask", -1, timeout=scaled(20))
        assert rejected.value.reason == "-1 is negative"
        await _waiting(handle, f"signal:end:{handle.run_id}")
        await handle.signal(f"end:{handle.run_id}")  # the run's end replays every reply
        assert await handle.result(timeout=scaled(20)) == [21, -1]
        steps = await app.list_steps(handle.run_id)
        run = await handle.get()
    assert [s.kind for s in steps] == ["request-wait", "reply"] * 2 + ["signal-wait"]
    replies = [s for s in steps if s.kind == "reply"]
    assert [(s.step, s.status) for s in replies] == [("reply:ask", "completed")] * 2
    documents = [s.to_dict() for s in steps]
    exported = {"run": run.to_dict(), "steps": documents}
    kinds = [s["kind"] for s in documents]
    assert kinds == ["request-wait", "reply"] * 2 + ["signal-wait"], kinds
    report = replay(app, json.dumps(exported, default=str))  # as `durably show --json`
    assert report.finished and report.output == [21, -1], report


async def test_requests_before_the_wait_are_buffered_in_order(db_url: str) -> None:
    app = _app(db_url)
    async with app:
        handle = await app.start("answer-sync", 3)
        asked = []
        for n in (1, 2, 3):  # each one stored before the next, and before any worker runs
            asked.append(asyncio.create_task(app.request(handle.run_id, "ask", n,
                                                         timeout=scaled(30))))  # fmt: skip
            await eventually(partial(_pending, app, n), what=f"{n} requests stored")
        async with app.worker():
            answers = await asyncio.gather(*asked)
            assert await handle.result(timeout=scaled(20)) == [1, 2, 3]
    assert answers == [2, 4, 6]


async def _pending(app: Durably, count: int) -> bool:
    signals = await app.list_signals()
    return len([s for s in signals if s["name"] == "durably:request:ask"]) >= count


async def test_timeout_then_get_reply(db_url: str) -> None:
    app = _app(db_url)
    async with app, app.worker():
        handle = await app.start("slow")
        with pytest.raises(WorkflowTimeoutError) as timed_out:
            await app.request(handle.run_id, "ask", None, timeout="100ms")
        request_id = timed_out.value.request_id  # type: ignore[attr-defined]
        with pytest.raises(WorkflowTimeoutError):
            await app.get_reply(request_id)  # still pending
        await _waiting(handle, f"signal:go:{handle.run_id}")
        await handle.signal(f"go:{handle.run_id}")
        assert await app.get_reply(request_id, timeout=scaled(20)) == "late"
        assert await handle.result(timeout=scaled(20)) == "done"
        assert await app.get_reply(request_id) == "late"


async def test_a_wait_for_a_request_times_out_with_none(db_url: str) -> None:
    app = _app(db_url)
    async with app, app.worker():
        handle = await app.start("timeout")
        assert await handle.result(timeout=scaled(20)) == "none"


async def test_a_finished_or_unknown_run_is_refused(db_url: str) -> None:
    app = _app(db_url)
    async with app, app.worker():
        handle = await app.start("timeout")
        await handle.result(timeout=scaled(20))
        with pytest.raises(RunTerminalError):
            await app.request(handle.run_id, "ask", 1, timeout="1s")
        with pytest.raises(RunNotFound):
            await app.request("no-such-run", "ask", 1, timeout="1s")
        assert not [s for s in await app.list_signals() if s["name"].startswith("durably:")]


async def test_the_same_idempotency_key_delivers_once(db_url: str) -> None:
    app = _app(db_url)
    async with app, app.worker():
        handle = await app.start("answer", 2)
        first = await app.request(handle.run_id, "ask", 5, idempotency_key="k", timeout=scaled(20))
        again = await app.request(handle.run_id, "ask", 9, idempotency_key="k", timeout=scaled(20))
        assert first == again == 10
        assert await app.request(handle.run_id, "ask", 7, timeout=scaled(20)) == 14
        await _waiting(handle, f"signal:end:{handle.run_id}")
        await handle.signal(f"end:{handle.run_id}")
        assert await handle.result(timeout=scaled(20)) == [5, 7]
        # Finished now: the key still names its answer.
        assert await app.request(handle.run_id, "ask", 5, idempotency_key="k") == 10


async def test_the_sync_client(db_url: str) -> None:
    server, client = _app(db_url), _app(db_url)
    async with server, server.worker():
        handle = await server.start("answer-sync", 1)
        assert await asyncio.to_thread(client.sync.request, handle.run_id, "ask", 4) == 8
        assert await handle.result(timeout=scaled(20)) == [4]
        await asyncio.to_thread(client.sync.close)


async def test_retention_purges_a_run_s_requests_with_it(db_url: str) -> None:
    app = _app(db_url)
    async with app, app.worker():
        handle = await app.start("answer-sync", 1)
        request_id = await app.send_request(handle.run_id, "ask", 3)
        assert await app.get_reply(request_id, timeout=scaled(20)) == 6
        assert await handle.result(timeout=scaled(20)) == [3]
        purged = await app.purge("0s")
        assert purged["runs"] == 1, purged
        with pytest.raises(InvalidInput, match="no request"):
            await app.get_reply(request_id)


async def test_a_run_that_ends_without_answering_ends_the_wait(db_url: str) -> None:
    app = _app(db_url)
    async with app, app.worker():
        handle = await app.start("slow")
        asked = asyncio.create_task(app.request(handle.run_id, "ask", 1, timeout=scaled(30)))
        await _waiting(handle, f"signal:go:{handle.run_id}")  # took it, will never reply
        await handle.cancel()
        with pytest.raises(RunTerminalError, match="canceled"):
            await asked


def _bump_fence(url: str, run_id: str) -> None:
    """Another claim's fence, as if the lease had been lost (from a thread: SQLite's lock)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=scaled(30)) as conn:
            conn.execute("UPDATE durably_runs SET fence = fence + 1 WHERE id = ?", (run_id,))
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE durably.runs SET fence = fence + 1 WHERE id = %s", (run_id,))


async def test_a_lost_lease_before_the_reply_answers_once(db_url: str) -> None:
    app = Durably(db_url)
    entered, release = asyncio.Event(), asyncio.Event()
    calls: list[int] = []

    async def gate() -> None:
        calls.append(1)
        entered.set()
        await release.wait()

    @app.workflow(name="fenced", version="v1")
    async def fenced(ctx: WorkflowContext) -> str:
        req = await ctx.step.wait_for_request("ask")
        assert req is not None
        await ctx.step.run("gate", gate)
        await ctx.step.reply(req, "once")
        return "done"

    async with app, app.worker(lease=duration(2), heartbeat=duration(0.5)):
        handle = await fenced.start()
        asked = asyncio.create_task(app.request(handle.run_id, "ask", None, timeout=scaled(60)))
        await eventually(entered.is_set, what="the step after the wait")
        await asyncio.to_thread(_bump_fence, db_url, handle.run_id)
        release.set()  # its record, and so the reply, fail: the lease is lost
        assert await asked == "once"
        assert await handle.result(timeout=scaled(30)) == "done"
        steps = await app.list_steps(handle.run_id)
    assert len(calls) >= 2  # run again by the claim after the lost one
    assert [s.status for s in steps if s.kind == "reply"] == ["completed"]


async def test_a_request_follows_a_chain_of_continue_as_new(db_url: str) -> None:
    """Requests addressed to a run that continued reach its chain's live run, and its
    answer reaches the client; one still buffered when a run continues moves with it."""
    app = Durably(db_url)

    @app.workflow(name="svc", version="v1")
    async def svc(ctx: Any, gen: int) -> str:
        if gen == 1:  # continues with a request still buffered for it
            await ctx.step.wait_for_signal("go")
            ctx.continue_as_new(gen + 1)
        req = await ctx.step.wait_for_request("ask", timeout="1m")
        assert req is not None
        await ctx.step.reply(req, f"gen{gen}")
        if gen == 0:
            ctx.continue_as_new(gen + 1)
        return "done"

    async with app, app.worker():
        first = await svc.start(0)
        assert await app.request(first.run_id, "ask", 0, timeout=scaled(20)) == "gen0"
        # Sent by the first run's id while generation 1 waits for "go": buffered there.
        pending = await app.send_request(first.run_id, "ask", 1)
        await app.send_signal("go", run_id=first.run_id)
        assert await app.get_reply(pending, timeout=scaled(20)) == "gen2"
        assert await first.result(timeout=scaled(20)) == "done"


async def test_a_signal_may_not_take_the_name_requests_are_sent_as(db_url: str) -> None:
    """`durably:request:<name>` is where requests are buffered: a user's signal under it
    would reach a `wait_for_request` as a request nobody can answer."""
    app = _app(db_url)
    async with app:
        handle = await app.start("answer", 1)
        with pytest.raises(InvalidInput, match="reserved"):
            await app.send_signal("durably:request:ask", 1)
        with pytest.raises(InvalidInput, match="reserved"):
            await app.send_signal("durably:request:ask", 1, run_id=handle.run_id)
        assert await app.list_signals(pending=False) == []


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
async def test_a_request_taken_but_not_answered_goes_to_the_next_run_of_the_chain(
    db_url: str, sealed: bool
) -> None:
    """A run that takes a request and continues as new before it answers hands the request
    to the next run, which receives it again and answers it: the client gets that answer,
    not a timeout for a request no run can answer any more (with its data encrypted at
    rest too: the database finds the request without reading its data)."""
    codec = FernetCodec([FernetCodec.generate_key()]) if sealed else None
    app = Durably(db_url, codec=codec)

    @app.workflow(name="defer", version="v1")
    async def defer(ctx: Any, gen: int) -> str:
        req = await ctx.step.wait_for_request("ask", timeout="1m")
        assert req is not None
        if gen == 0:  # took it, answers it in the next run
            ctx.continue_as_new(gen + 1)
        await ctx.step.reply(req, f"{req.data} by gen{gen}")
        return "done"

    async with app, app.worker():
        first = await defer.start(0)
        assert await app.request(first.run_id, "ask", "q", timeout=scaled(20)) == "q by gen1"
        assert await first.result(timeout=scaled(20)) == "done"
