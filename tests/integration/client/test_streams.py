"""Streams (§4.21) on both backends: readers before, during and after the writes get
every value once, in order; close and the run's end stop them; replay writes nothing
again; step bodies write at once; purge removes them."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from durably import Durably, InvalidInput, RetryPolicy, RunNotFound, StepContext
from tests.helpers import duration, eventually, scaled


async def _collect(app: Durably, run_id: str, key: str, offset: int = 0) -> list[Any]:
    return [v async for v in app.read_stream(run_id, key, offset)]


async def test_readers_before_during_and_after_get_every_value_once_in_order(
    db_url: str,
) -> None:
    app = Durably(db_url)

    @app.workflow(name="tokens", version="v1")
    async def tokens(ctx: Any) -> str:
        for i in range(5):
            assert await ctx.step.write_stream("tokens", {"i": i}) == i
        await ctx.step.wait_for_signal("more", timeout=duration(30))  # parks: a replay
        for i in range(5, 10):
            await ctx.step.write_stream("tokens", {"i": i})
        await ctx.step.close_stream("tokens")
        await ctx.step.write_stream("other", "after")
        await ctx.step.wait_for_signal("finish", timeout=duration(30))
        return "ok"

    expected = [{"i": i} for i in range(10)]
    async with app:
        handle = await tokens.start()
        before = asyncio.create_task(_collect(app, handle.run_id, "tokens"))
        async with app.worker():
            await eventually(lambda: _waiting(app, handle.run_id), what="the first wait")
            during = asyncio.create_task(_collect(app, handle.run_id, "tokens"))
            from_three = asyncio.create_task(_collect(app, handle.run_id, "tokens", 3))
            await app.send_signal("more")
            assert await asyncio.wait_for(before, scaled(10)) == expected  # close ends it
            assert await asyncio.wait_for(during, scaled(10)) == expected
            assert await asyncio.wait_for(from_three, scaled(10)) == expected[3:]
            await eventually(lambda: _waiting(app, handle.run_id), what="the last wait")
            assert await _collect(app, handle.run_id, "tokens") == expected  # closed: ends
            other = asyncio.create_task(_collect(app, handle.run_id, "other"))
            await app.send_signal("finish")
            assert await handle.result(timeout=scaled(10)) == "ok"
            assert await asyncio.wait_for(other, scaled(10)) == ["after"]  # the end closes
        assert await _collect(app, handle.run_id, "tokens") == expected  # after the end
        assert await _collect(app, handle.run_id, "tokens", 10) == []
        assert await _collect(app, handle.run_id, "never") == []
        steps = [(s.step, s.kind) for s in await app.list_steps(handle.run_id)]
        assert steps.count(("tokens", "stream")) == 10  # replays wrote nothing again
        assert ("close:tokens", "stream") in steps
        assert await app.list_streams(handle.run_id) == [
            {"key": "other", "length": 1, "closed": False},
            {"key": "tokens", "length": 10, "closed": True},
        ]
        with pytest.raises(RunNotFound):
            await _collect(app, "nope", "tokens")


async def _waiting(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting"


async def test_values_are_exact_refused_when_json_cannot_hold_them(db_url: str) -> None:
    app = Durably(db_url)
    value = {"b": 1, "a": 1e23, "big": 2**70, "u": "żółw ✓", "nested": [{"z": 0, "y": 1}]}

    @app.workflow(name="exact", version="v1")
    async def exact(ctx: Any) -> None:
        await ctx.step.write_stream("s", value)
        await ctx.step.write_stream("s", math.nan)

    async with app:
        handle = await exact.start()
        async with app.worker():
            run = await handle.wait(timeout=scaled(10))
        assert run.status == "failed" and "stream 's'" in str(run.error)
        (got,) = await _collect(app, handle.run_id, "s")
        assert got == value and list(got) == list(value) and isinstance(got["a"], float)
        assert list(got["nested"][0]) == ["z", "y"]


async def test_a_closed_stream_takes_no_more(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="closer", version="v1")
    async def closer(ctx: Any) -> None:
        await ctx.step.close_stream("s")
        await ctx.step.write_stream("s", 1)

    async with app:
        handle = await closer.start()
        async with app.worker():
            run = await handle.wait(timeout=scaled(10))
        assert run.status == "failed" and "closed" in str(run.error)
        with pytest.raises(InvalidInput):
            await _collect(app, handle.run_id, "s", -1)


async def test_step_bodies_write_at_once_and_a_failed_run_closes(db_url: str) -> None:
    app = Durably(db_url)
    gate = asyncio.Event()

    def threaded(sctx: StepContext, n: int) -> int:
        for i in range(n):
            sctx.write_stream("body", f"t{i}")
        return n

    async def awaited(sctx: StepContext) -> None:
        await sctx.write_stream("body", "a0")
        sctx.write_stream("body", "a1")  # written in call order, even not awaited
        await sctx.write_stream("body", "a2")
        await gate.wait()

    @app.workflow(name="bodies", version="v1", retry=RetryPolicy(max_attempts=1))
    async def bodies(ctx: Any) -> None:
        await ctx.step.run("threaded", threaded, 2)
        await ctx.step.run("awaited", awaited)
        raise ValueError("boom")

    async with app:
        handle = await bodies.start()
        seen: list[Any] = []
        async with app.worker():
            async for value in app.read_stream(handle.run_id, "body"):
                seen.append(value)
                if value == "a2":  # the step still runs: written at once, read at once
                    gate.set()
            run = await handle.wait(timeout=scaled(10))
        assert seen == ["t0", "t1", "a0", "a1", "a2"] and run.status == "failed"


async def test_purge_removes_a_runs_streams(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="short", version="v1")
    async def short(ctx: Any) -> None:
        await ctx.step.write_stream("s", 1)

    async with app:
        keep, gone = await short.start(), await short.start()
        async with app.worker():
            await keep.wait(timeout=scaled(10))
            await gone.wait(timeout=scaled(10))
        await app.purge(older_than="0s", status="completed", workflow="short")
        with pytest.raises(RunNotFound):
            await _collect(app, gone.run_id, "s")
        rows = await app.store.db.fetch("stream_read", run_id=gone.run_id, key="s",
                                        from_offset=0, limit=10)  # fmt: skip
        assert rows == []


def test_sync_workflows_and_the_blocking_reader(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="sync-tokens", version="v1")
    def sync_tokens(ctx: Any) -> int:
        for i in range(3):
            ctx.step.write_stream("s", i)
        ctx.step.close_stream("s")
        return 3

    handle = app.sync.start("sync-tokens")

    async def work() -> None:
        async with app.worker():
            await app.handle(handle.run_id).wait(timeout=scaled(10))

    app.sync.run(work())
    assert list(app.sync.read_stream(handle.run_id, "s")) == [0, 1, 2]
    assert list(app.sync.read_stream(handle.run_id, "s", offset=2)) == [2]
    app.sync.close()


async def test_the_payload_limit_applies_to_each_value(db_url: str) -> None:
    app = Durably(db_url, max_payload_bytes=1000)
    refused: list[str] = []

    def body(sctx: StepContext) -> None:
        try:
            sctx.write_stream("s", "x" * 2000)
        except InvalidInput as exc:
            refused.append(str(exc))

    @app.workflow(name="big", version="v1", retry=RetryPolicy(max_attempts=1))
    async def big(ctx: Any) -> None:
        await ctx.step.run("body", body)
        await ctx.step.write_stream("s", "y" * 10)
        await ctx.step.write_stream("s", "x" * 2000)

    async with app:
        handle = await big.start()
        async with app.worker():
            run = await handle.wait(timeout=scaled(10))
        assert run.status == "failed" and "stream 's'" in str(run.error)
        assert len(refused) == 1 and "stream 's'" in refused[0]
        assert await _collect(app, handle.run_id, "s") == ["y" * 10]


async def test_list_streams_with_a_last_past_any_integer_the_database_holds(db_url: str) -> None:
    """`last` beyond a 64-bit integer is every value (or a clear InvalidInput), never the
    driver's overflow (before: OverflowError from sqlite3, NumericValueOutOfRange from
    psycopg escaped to the caller)."""
    app = Durably(db_url)

    @app.workflow(name="writer", version="v1")
    async def writer(ctx: Any) -> None:
        await ctx.step.write_stream("s", 1)
        await ctx.step.write_stream("s", 2)

    async with app:
        handle = await writer.start()
        async with app.worker():
            await handle.result(timeout=scaled(10))
        for last in (2**63, 10**30):
            try:
                found = await app.list_streams(handle.run_id, last=last)
            except InvalidInput:
                continue
            assert [v["value"] for v in found[0]["last"]] == [1, 2]
        with pytest.raises(InvalidInput):
            await _collect(app, handle.run_id, "s", 2**63)
