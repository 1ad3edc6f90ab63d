"""Operating runs (§4.18): resume and fork, on both backends."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg
import pytest

from durably import Durably, InvalidInput, RetryPolicy, RunNotFound
from tests.helpers import duration, eventually, scaled

TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")


async def _status(app: Durably, run_id: str) -> str:
    return (await app.get_run(run_id)).status


async def test_resume_continues_a_failed_run_from_its_last_completed_step(db_url: str) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()
    fixed = False

    def body(name: str) -> str:
        ran[name] += 1
        if name == "charge" and not fixed:
            raise RuntimeError("card declined")
        return name

    @app.workflow(name="order", version="v1")
    async def order(ctx: Any) -> list[str]:
        first = await ctx.step.run("reserve", body, "reserve")
        await ctx.step.sleep("pause", "10ms")
        second = await ctx.step.run("charge", body, "charge", retry=TWICE)
        return [first, second]

    async with app, app.worker():
        handle = await order.start()
        run = await handle.wait(timeout=scaled(10))
        assert run.status == "failed" and "card declined" in str(run.error)
        assert ran == {"reserve": 1, "charge": 2}

        fixed = True
        resumed = await app.resume(handle.run_id)
        assert resumed.status == "pending" and resumed.error is None
        assert await handle.result(timeout=scaled(10)) == ["reserve", "charge"]
        assert ran == {"reserve": 1, "charge": 3}  # a fresh budget; reserve never again
        steps = [(s.step, s.attempt, s.status) for s in await app.list_steps(handle.run_id)]
        assert ("charge", 3, "completed") in steps
        assert [s for s in steps if s[0] == "reserve"] == [("reserve", 1, "completed")]

        with pytest.raises(InvalidInput, match="is completed: only a failed or canceled"):
            await app.resume(handle.run_id)
        with pytest.raises(RunNotFound):
            await app.resume("no-such-run")


async def test_resume_a_canceled_run_waits_again(db_url: str) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()

    def body() -> str:
        ran["first"] += 1
        return "first"

    @app.workflow(name="waiter", version="v1")
    async def waiter(ctx: Any) -> list[Any]:
        first = await ctx.step.run("first", body)
        got = await ctx.step.wait_for_signal("go", timeout=duration(30))
        return [first, got]

    async with app, app.worker():
        handle = await waiter.start()
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the wait")
        await app.cancel(handle.run_id)
        with pytest.raises(InvalidInput, match="is pending"):
            await app.resume((await waiter.start(available_at="+1h")).run_id)
        await app.resume(handle.run_id)
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="waiting again")
        sent = await app.send_signal("go", 7)
        assert sent["delivered_to"] == [handle.run_id]
        assert await handle.result(timeout=scaled(10)) == ["first", 7]
        assert ran["first"] == 1


async def _is(app: Durably, run_id: str, status: str) -> bool:
    return await _status(app, run_id) == status


async def test_fork_copies_the_first_steps_onto_a_new_version(db_url: str) -> None:
    app = Durably(db_url)
    ran: Counter[str] = Counter()

    def body(name: str) -> str:
        ran[name] += 1
        return name

    @app.workflow(name="pipeline", version="v1")
    async def v1(ctx: Any, tag: str) -> list[str]:
        a = await ctx.step.run("a", body, "a")
        b = await ctx.step.run("b", body, "b")
        c = await ctx.step.run("c", body, "c-old")
        return [tag, a, b, c]

    @app.workflow(name="pipeline", version="v2")
    async def v2(ctx: Any, tag: str) -> list[str]:
        a = await ctx.step.run("a", body, "a")
        b = await ctx.step.run("b", body, "b")
        c = await ctx.step.run("c", body, "c-new")
        return [tag, a, b, c]

    async with app, app.worker():
        old = await v1.start("t")
        assert await old.result(timeout=scaled(10)) == ["t", "a", "b", "c-old"]
        before = len(await app.list_runs())
        for bad in (-1, 4):
            with pytest.raises(InvalidInput, match="its log has 3 entries"):
                await app.fork(old.run_id, from_position=bad, version="v2")
        with pytest.raises(RunNotFound):
            await app.fork("nope", from_position=1)
        assert len(await app.list_runs()) == before  # nothing was written

        forked = await app.fork(old.run_id, from_position=2, version="v2")
        assert forked.run_id != old.run_id
        assert await forked.result(timeout=scaled(10)) == ["t", "a", "b", "c-new"]
        assert ran == {"a": 1, "b": 1, "c-old": 1, "c-new": 1}
        assert (await forked.get()).version == "v2"

        # A version no worker here serves: the fork waits for one, untouched.
        elsewhere = await app.fork(old.run_id, from_position=1, version="v9")
        assert (await elsewhere.get()).version == "v9"
        await app.cancel(elsewhere.run_id)

        same = await app.fork(old.run_id, from_position=0)
        assert await same.result(timeout=scaled(10)) == ["t", "a", "b", "c-old"]
        assert ran == {"a": 2, "b": 2, "c-old": 2, "c-new": 1}


async def test_patched_is_false_for_history_recorded_before_the_patch(db_url: str) -> None:
    app = Durably(db_url)
    code = {"version": "old"}
    paths: list[tuple[str, str]] = []

    def body(name: str) -> str:
        return name

    @app.workflow(name="evolving", version="v1")
    async def evolving(ctx: Any) -> list[Any]:
        out = [await ctx.step.run("a", body, "a")]
        if code["version"] == "new" and await ctx.patched("before-wait"):
            out.append(await ctx.step.run("new-before", body, "new-before"))
        elif code["version"] == "cleaned":
            ctx.deprecate_patch("before-wait")
            out.append(await ctx.step.run("new-before", body, "new-before"))
        out.append(await ctx.step.wait_for_signal(f"go:{ctx.run_id}", timeout=duration(30)))
        if code["version"] != "old":
            took = await ctx.patched("after-wait")
            paths.append((ctx.run_id, "after-wait" if took else "old"))
            if took:
                out.append(await ctx.step.run("new-after", body, "new-after"))
        out.append(await ctx.step.run("b", body, "b"))
        return out

    async with app:
        async with app.worker():
            old = await evolving.start()
            await eventually(lambda: _is(app, old.run_id, "waiting"), what="old run parked")
        code["version"] = "new"
        async with app.worker():
            new = await evolving.start()
            await eventually(lambda: _is(app, new.run_id, "waiting"), what="new run parked")
            await app.send_signal(f"go:{old.run_id}", 1)
            assert await old.result(timeout=scaled(10)) == ["a", 1, "new-after", "b"]
        code["version"] = "cleaned"  # every run now takes the new path before the wait
        async with app.worker():
            await app.send_signal(f"go:{new.run_id}", 2)
            assert await new.result(timeout=scaled(10)) == [
                "a", "new-before", 2, "new-after", "b"]  # fmt: skip
            fresh = await evolving.start()
            await eventually(lambda: _is(app, fresh.run_id, "waiting"), what="fresh run parked")
            await app.send_signal(f"go:{fresh.run_id}", 3)
            assert await fresh.result(timeout=scaled(10)) == [
                "a", "new-before", 3, "new-after", "b"]  # fmt: skip
        kinds = [(s.step, s.kind) for s in await app.list_steps(new.run_id)]
        assert ("before-wait", "patch") in kinds and ("after-wait", "patch") in kinds
        assert [s.kind for s in await app.list_steps(fresh.run_id)].count("patch") == 1


async def test_a_signal_delivered_to_a_canceled_run_waits_for_its_resume(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="approval", version="v1")
    async def approval(ctx: Any) -> Any:
        return await ctx.step.wait_for_signal("approve", timeout=duration(30))

    async with app:
        async with app.worker():
            handle = await approval.start()
            await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the wait")
        # No worker: the signal is delivered to the wait, and the run canceled before any
        # worker records it.
        assert (await app.send_signal("approve", "yes"))["delivered_to"] == [handle.run_id]
        await app.cancel(handle.run_id)
        assert await app.list_signals() == []
        await app.resume(handle.run_id)
        assert [s["name"] for s in await app.list_signals()] == ["approve"]
        async with app.worker():
            assert await handle.result(timeout=scaled(10)) == "yes"
        assert await app.list_signals() == []


async def test_a_fork_racing_the_purge_of_its_run_fails_and_writes_nothing(pg_url: str) -> None:
    """The fork reads its source's log, then copies it in a transaction of its own: a purge
    between the two (held there from outside by a lock on runs, which the fork's insert waits
    for) must fail the fork, not start a run with a shorter history whose steps run again."""
    app = Durably(pg_url)
    ran: Counter[str] = Counter()

    def body(name: str) -> str:
        ran[name] += 1
        return name

    @app.workflow(name="twice", version="v1")
    async def twice(ctx: Any) -> list[str]:
        return [await ctx.step.run(n, body, n) for n in ("a", "b")]

    async with app, app.worker():
        old = await twice.start()
        await old.result(timeout=scaled(10))
        async with await psycopg.AsyncConnection.connect(pg_url) as purger:
            await purger.execute("LOCK TABLE durably.runs IN SHARE MODE")
            fork = asyncio.create_task(app.fork(old.run_id, from_position=2))
            await eventually(lambda: _waits_for_runs(pg_url), what="the fork's insert waiting")
            await purger.execute("DELETE FROM durably.runs WHERE id = %s", (old.run_id,))
            await purger.commit()
        with pytest.raises(RunNotFound, match="purged"):
            await fork
        assert await app.list_runs() == []  # no fork was started
        assert ran == {"a": 1, "b": 1}


async def _waits_for_runs(url: str) -> bool:
    """Whether the fork's insert of its run waits on the lock: that statement, not any
    waiter on runs (the worker beside it may write runs too, and a purge let through
    before the fork read the log would fail the test for the wrong reason)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE NOT l.granted AND l.relation = CAST('durably.runs' AS regclass)"
            " AND a.query LIKE '%INSERT INTO %runs (id, namespace,%'"
        )
        row = await cur.fetchone()
        return row is not None and row[0] > 0
