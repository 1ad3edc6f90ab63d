"""Per-key strategies (SPEC §4.23) on the start path: `on_full="cancel_new"` cancels a
start whose key is full at once, `on_full="cancel_running"` cancels the key's older runs
through the normal cancel (bodies interrupted, undos run once) so that the newest runs;
runs asleep hold no slot; the strategy is shown with the queue; bad declarations refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durably import Durably, Run, StepContext
from durably.core.errors import InvalidInput
from durably.store.queues import QueueClaims
from tests.helpers import eventually, scaled


def _app(db_url: str, on_full: str, per_key: int = 1) -> tuple[Durably, Any, dict[str, Any]]:
    """An app whose workflow `job` holds its step until its input is in `seen["go"]`,
    its first step undone (`seen["undone"]`) when canceled."""
    app = Durably(db_url)
    q = app.queue("q", per_key=per_key, on_full=on_full)
    seen: dict[str, Any] = {"go": set(), "undone": [], "holding": set()}

    def reserve(k: int) -> int:
        return k

    def release(k: int) -> None:
        seen["undone"].append(k)

    async def hold(ctx: StepContext, k: int) -> int:
        seen["holding"].add(k)
        while k not in seen["go"]:
            await asyncio.sleep(0.01)
        return k

    @app.workflow(name="job", version="v1", queue=q)
    async def job(ctx: Any, k: int) -> int:
        await ctx.step.run("reserve", reserve, k, compensate=release)
        await ctx.step.run("hold", hold, k)
        if k < 0:
            await ctx.step.sleep("nap", "1h")
        return k

    return app, job, seen


async def _runs(app: Durably) -> dict[int, Run]:
    return {r.input: r for r in await app.list_runs(workflow="job", limit=100)}


async def test_cancel_new_cancels_a_start_whose_key_is_full(db_url: str) -> None:
    app, job, _ = _app(db_url, "cancel_new")
    async with app:
        first = await job.start(1, concurrency_key="a")
        second = await job.start(2, concurrency_key="a")  # "a" is queued: full
        other = await job.start(3, concurrency_key="b")
        free = await job.start(4)  # no key: no per-key limit
        assert await first.status() == "pending"
        assert await other.status() == "pending" and await free.status() == "pending"
        run = await app.get_run(second.run_id)
        assert run.status == "canceled" and run.finished_at is not None
        assert run.error is not None and "cancel_new" in run.error["message"]
        assert "'a' is full" in run.error["message"]
        # The same start again (its idempotency key) returns the run it started.
        keyed = await job.start(5, concurrency_key="a", idempotency_key="k")
        assert (await keyed.status()) == "canceled"
        again = await job.start(5, concurrency_key="a", idempotency_key="k")
        assert again.run_id == keyed.run_id
        # Through the sync facade: the same rule.
        assert (await asyncio.to_thread(
            lambda: app.sync.start("job", 6, concurrency_key="a").run_id)) != ""  # fmt: skip
        assert [r.status for r in (await _runs(app)).values() if r.input == 6] == ["canceled"]


async def test_cancel_new_admits_again_once_the_key_has_room(db_url: str) -> None:
    app, job, seen = _app(db_url, "cancel_new", per_key=2)
    async with app, app.worker(concurrency=4):
        one = await job.start(1, concurrency_key="a")
        two = await job.start(2, concurrency_key="a")
        await eventually(lambda: {1, 2} <= seen["holding"], what="both runs to hold")
        three = await job.start(3, concurrency_key="a")  # two running: full
        assert await three.status() == "canceled"
        seen["go"].update({1, 2})
        assert await one.result(timeout=scaled(15)) == 1
        assert await two.result(timeout=scaled(15)) == 2
        seen["go"].add(4)
        four = await job.start(4, concurrency_key="a")
        assert await four.result(timeout=scaled(15)) == 4
        assert seen["undone"] == []  # a run canceled at its start did nothing to undo


async def test_cancel_running_cancels_the_keys_older_runs(db_url: str) -> None:
    app, job, seen = _app(db_url, "cancel_running")
    async with app, app.worker(concurrency=4):
        first = await job.start(1, concurrency_key="a")
        await eventually(lambda: 1 in seen["holding"], what="the first run to hold")
        b = await job.start(9, concurrency_key="b")  # another key: not touched
        await eventually(lambda: 9 in seen["holding"], what="the run of key b")
        second = await job.start(2, concurrency_key="a")
        third = await job.start(3, concurrency_key="a")  # the second never ran
        seen["go"].update({3, 9})
        assert await third.result(timeout=scaled(15)) == 3
        assert await b.result(timeout=scaled(15)) == 9

        async def ended(h: Any) -> bool:
            return bool((await app.get_run(h.run_id)).finished_at is not None)

        await eventually(lambda: ended(first), what="the first run's undo")
        runs = await _runs(app)
        assert {k: r.status for k, r in runs.items()} == {
            1: "canceled",
            2: "canceled",
            3: "completed",
            9: "completed",
        }
        error = runs[1].error
        assert error is not None and f"superseded by run {second.run_id}" in error["message"]
        assert seen["undone"] == [1]  # the running one's undo, once; the queued one had none
        assert 2 not in seen["holding"]  # canceled before any worker claimed it
        assert (await app.get_run(third.run_id)).status == "completed"


async def test_cancel_running_keeps_the_newest_per_key(db_url: str) -> None:
    app, job, _ = _app(db_url, "cancel_running", per_key=2)
    async with app:
        handles = [await job.start(k, concurrency_key="a") for k in range(5)]
        runs = await _runs(app)
        assert {k: r.status for k, r in runs.items()} == {
            0: "canceled",
            1: "canceled",
            2: "canceled",
            3: "pending",
            4: "pending",
        }
        assert len(handles) == 5


async def test_a_run_asleep_holds_no_slot(db_url: str) -> None:
    """As on the claim path: a run that sleeps is not counted, and not canceled."""
    for on_full in ("cancel_new", "cancel_running"):
        app, job, seen = _app(db_url, on_full)
        async with app, app.worker(concurrency=4):
            seen["go"].update({-1, 2})
            asleep = await job.start(-1, concurrency_key=on_full)

            async def waiting(h: Any = asleep) -> bool:
                return bool(await h.status() == "waiting")

            await eventually(waiting, what="the run to sleep")
            newer = await job.start(2, concurrency_key=on_full)
            assert await newer.result(timeout=scaled(15)) == 2
            assert await asleep.status() == "waiting"
            await app.cancel(asleep.run_id)


async def test_the_strategy_is_declared_and_shown(db_url: str) -> None:
    app, _, _ = _app(db_url, "cancel_running")
    async with app:
        await QueueClaims(app.store).declare(list(app.queues.values()))
        [q] = await app.queue_counts()
        assert (q["name"], q["per_key"], q["on_full"]) == ("q", 1, "cancel_running")


def test_bad_strategies_are_refused(db_url: str) -> None:
    app = Durably(db_url)
    with pytest.raises(InvalidInput, match="on_full must be one of"):
        app.queue("q", per_key=1, on_full="cancel_oldest")
    with pytest.raises(InvalidInput, match="declare per_key"):
        app.queue("q", on_full="cancel_new")
    with pytest.raises(InvalidInput, match="on_full must be one of"):
        app.queue("q", per_key=1, on_full=None)  # type: ignore[arg-type]
    assert app.queues == {}
    assert app.queue("q", concurrency=1).on_full == "wait"


async def test_starts_of_one_key_at_once_are_admitted_one_by_one(db_url: str) -> None:
    """20 starts at once, each in a transaction of its own on a connection of its own:
    with cancel_new one stays; with cancel_running one stays, and it is the last admitted
    (every other names the run that superseded it)."""
    for on_full in ("cancel_new", "cancel_running"):
        app, job, _ = _app(db_url, on_full)
        async with app:
            handles = await asyncio.gather(
                *(job.start(k, concurrency_key=on_full) for k in range(20))
            )
            runs = {r.run_id: r for r in await app.list_runs(workflow="job", limit=100)
                    if r.concurrency_key == on_full}  # fmt: skip
            assert set(runs) == {h.run_id for h in handles}
            live = [r for r in runs.values() if r.status == "pending"]
            assert len(live) == 1, on_full
            if on_full == "cancel_running":
                superseders = {r.error["message"].split()[3].rstrip(":")
                               for r in runs.values() if r.error is not None}  # fmt: skip
                assert live[0].run_id in superseders
