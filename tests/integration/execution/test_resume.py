"""Resume keeps everything the run completed (§4.18), on both backends: a caught failure and
the steps after it, a branch that completed after its sibling failed, a signal a wait took,
and the compensations that ran."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import Counter
from typing import Any

import psycopg
import pytest

from durably import Durably, InvalidInput, RetryPolicy, StepFailedError
from durably.store.recorder import StepRecorder
from durably.store.records import Lease, PendingStep
from tests.helpers import duration, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)


async def _is(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


async def test_resume_does_not_run_again_what_completed_after_a_caught_failure(
    db_url: str,
) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()
    broken = {"reserve", "ship"}

    def body(name: str) -> str:
        ran[name] += 1
        if name in broken:
            raise RuntimeError(f"{name} is down")
        return name

    @app.workflow(name="order", version="v1")
    async def order(ctx: Any) -> list[str]:
        try:
            reserved = await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        except StepFailedError:
            reserved = "no reservation"
        charged = await ctx.step.run("charge", body, "charge")
        shipped = await ctx.step.run("ship", body, "ship", retry=ONCE)
        return [reserved, charged, shipped]

    async with app, app.worker():
        handle = await order.start()
        assert (await handle.wait(timeout=scaled(10))).status == "failed"
        assert ran == {"reserve": 1, "charge": 1, "ship": 1}

        broken.clear()
        await app.resume(handle.run_id)
        # The caught failure replays (the code takes its except path again, as it did
        # when `charge` ran); `ship` gets a fresh budget; `charge` never runs again.
        assert await handle.result(timeout=scaled(10)) == ["no reservation", "charge", "ship"]
        assert ran == {"reserve": 1, "charge": 1, "ship": 2}


async def test_resume_keeps_a_branch_that_completed_after_its_sibling_failed(
    db_url: str,
) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()
    broken = {"a"}

    def body(name: str) -> str:
        ran[name] += 1
        if name in broken:
            raise RuntimeError(f"{name} is down")
        return name

    @app.workflow(name="pair", version="v1")
    async def pair(ctx: Any) -> list[Any]:
        got = await ctx.gather(
            ctx.step.run("a", body, "a", retry=ONCE), ctx.step.run("b", body, "b"),
            return_exceptions=True,
        )  # fmt: skip
        for result in got:
            if isinstance(result, BaseException):
                raise result
        return list(got)

    async with app, app.worker():
        handle = await pair.start()
        assert (await handle.wait(timeout=scaled(10))).status == "failed"
        assert ran == {"a": 1, "b": 1}

        broken.clear()
        await app.resume(handle.run_id)
        assert await handle.result(timeout=scaled(10)) == ["a", "b"]
        assert ran == {"a": 2, "b": 1}  # `a` got a fresh budget; `b` completed: never again


async def test_resume_keeps_a_signal_a_wait_took(db_url: str) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()
    broken = {"reserve", "charge"}

    def body(name: str) -> str:
        ran[name] += 1
        if name in broken:
            raise RuntimeError(f"{name} is down")
        return name

    @app.workflow(name="approval", version="v1")
    async def approval(ctx: Any) -> list[Any]:
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        got = await ctx.step.wait_for_signal(f"approve:{ctx.run_id}", timeout=duration(30))
        return [got, await ctx.step.run("charge", body, "charge", retry=ONCE)]

    async with app, app.worker():
        handle = await approval.start()
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the wait")
        sent = await app.send_signal(f"approve:{handle.run_id}", {"by": "ann"})
        assert sent["delivered_to"] == [handle.run_id]
        assert (await handle.wait(timeout=scaled(10))).status == "failed"

        broken.clear()
        await app.resume(handle.run_id)
        assert await handle.result(timeout=scaled(10)) == [{"by": "ann"}, "charge"]
        assert await app.list_signals(pending=True) == []  # the buffer got no copy
        waits = [s for s in await app.list_steps(handle.run_id) if s.kind == "signal-wait"]
        assert len(waits) == 1  # taken once, replayed from history
        assert ran == {"reserve": 1, "charge": 2}


async def test_compensations_that_ran_do_not_run_again_after_resume(db_url: str) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()

    def body(name: str) -> str:
        ran[name] += 1
        if name == "ship":
            raise RuntimeError("ship is down")
        return name

    def refund(charged: str) -> None:
        ran[f"refund {charged}"] += 1

    @app.workflow(name="saga", version="v1")
    async def saga(ctx: Any) -> str:
        await ctx.step.run("charge", body, "charge", compensate=refund)
        await ctx.step.run("ship", body, "ship", retry=ONCE)
        return "done"

    @app.workflow(name="parked", version="v1")
    async def parked(ctx: Any) -> str:
        await ctx.step.run("charge", body, "charge", compensate=refund)
        await ctx.step.wait_for_signal(f"go:{ctx.run_id}", timeout=duration(30))
        await ctx.step.run("ship", body, "ship", retry=ONCE)
        return "done"

    async with app, app.worker():
        failed = await saga.start()
        assert (await failed.wait(timeout=scaled(10))).status == "failed"
        assert ran == {"charge": 1, "ship": 1, "refund charge": 1}
        await app.resume(failed.run_id)
        assert (await failed.wait(timeout=scaled(10))).status == "failed"
        # `charge` completed and was undone: neither runs again; `ship` got a fresh try.
        assert ran == {"charge": 1, "ship": 2, "refund charge": 1}

        ran.clear()
        canceled = await parked.start()
        await eventually(lambda: _is(app, canceled.run_id, "waiting"), what="the wait")
        await app.cancel(canceled.run_id)
        assert (await canceled.wait(timeout=scaled(10))).status == "canceled"
        assert ran == {"charge": 1, "refund charge": 1}
        await app.resume(canceled.run_id)
        await eventually(lambda: _is(app, canceled.run_id, "waiting"), what="waiting again")
        await app.send_signal(f"go:{canceled.run_id}", 1)
        assert (await canceled.wait(timeout=scaled(10))).status == "failed"
        assert ran == {"charge": 1, "ship": 1, "refund charge": 1}


async def test_fork_copies_the_log_faithfully_caught_failures_and_markers_included(
    db_url: str,
) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()

    def body(name: str) -> str:
        ran[name] += 1
        if name == "hold":
            raise RuntimeError("hold is down")
        return name

    @app.workflow(name="flow", version="v1")
    async def flow(ctx: Any) -> list[str]:
        out = [await ctx.step.run("a", body, "a")]
        try:
            out.append(await ctx.step.run("hold", body, "hold", retry=ONCE))
        except StepFailedError:
            out.append("no hold")
        if await ctx.patched("audit"):
            out.append("audited")
        await ctx.step.set_event("stage", "b")
        out.append(await ctx.step.run("b", body, "b"))
        out.append(await ctx.step.run("c", body, "c"))
        return out

    done = ["a", "no hold", "audited", "b", "c"]
    async with app, app.worker():
        old = await flow.start()
        assert await old.result(timeout=scaled(10)) == done
        # The log: 1 a, 2 hold (failed, caught), 3 patch audit, 4 event stage, 5 b, 6 c.
        with pytest.raises(InvalidInput, match=r"its log has 6 entries.*2 hold \(failed\)"):
            await app.fork(old.run_id, from_position=7)
        for n, again in ((5, {"c"}), (2, {"b", "c"}), (1, {"hold", "b", "c"})):
            before = Counter(ran)
            forked = await app.fork(old.run_id, from_position=n)
            assert await forked.result(timeout=scaled(10)) == done
            assert set((ran - before).keys()) == again, n


def _markers(url: str) -> int:
    """How many patch markers the database holds (read outside the engine)."""
    query = "SELECT count(*) FROM {} WHERE kind = 'patch'"
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30) as conn:
            return int(conn.execute(query.format("durably_step_attempts")).fetchone()[0])
    with psycopg.connect(url) as conn:
        row = conn.execute(query.format("durably.step_attempts")).fetchone()
        return int(row[0]) if row else 0


async def test_a_patch_marker_is_durable_before_its_answer_or_a_later_step(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sibling branch's step issued after `patched` (position p + 1) must not start before
    the marker at p is durable: were it recorded first and the worker killed, replay would
    find history past p without the marker, answer False and shift every position. The
    marker's write is made slow, so that a step that does not wait for it is caught."""
    record = StepRecorder.record

    async def slow_markers(self: StepRecorder, lease: Lease, step: PendingStep) -> str:
        if step.kind == "patch":
            await asyncio.sleep(0.3)
        return await record(self, lease, step)

    monkeypatch.setattr(StepRecorder, "record", slow_markers)
    app = Durably(db_url)
    seen: dict[str, int] = {}

    def sibling() -> str:
        seen["sibling"] = _markers(db_url)
        return "sibling"

    @app.workflow(name="branches", version="v1")
    async def branches(ctx: Any) -> list[Any]:
        async def patched_branch() -> bool:
            took = bool(await ctx.patched("p"))
            seen.setdefault("answer", _markers(db_url))
            return took

        async def other_branch() -> str:  # issued after the marker: position p + 1
            return str(await ctx.step.run("sibling", sibling))

        return list(await ctx.gather(patched_branch(), other_branch()))

    async with app, app.worker():
        for _ in range(3):
            seen.clear()
            handle = await branches.start()
            assert await handle.result(timeout=scaled(10)) == [True, "sibling"]
            total = _markers(db_url)
            assert seen == {"answer": total, "sibling": total}


async def test_purge_deletes_the_signals_resume_put_back_in_a_runs_buffer(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="approval", version="v1")
    async def approval(ctx: Any) -> Any:
        return await ctx.step.wait_for_signal("approve", timeout=duration(30))

    async with app:
        async with app.worker():
            handle = await approval.start()
            await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the wait")
        assert (await app.send_signal("approve", "yes"))["delivered_to"] == [handle.run_id]
        await app.cancel(handle.run_id)  # before a worker recorded the wait's end
        await app.resume(handle.run_id)
        assert [s["name"] for s in await app.list_signals()] == ["approve"]  # buffered
        await app.cancel(handle.run_id)  # and no worker took it
        assert (await app.purge(older_than="0s"))["runs"] == 1
        assert await app.list_signals(pending=False) == []
