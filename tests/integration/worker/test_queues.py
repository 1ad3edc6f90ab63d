"""Queues (§4.17) on the claim path, claim by claim: concurrency, per-key and rate limits,
priority order, parked runs holding no slot, and bad declarations refused."""

from __future__ import annotations

from typing import Any

import pytest

from durably import Durably
from durably.core.errors import ConfigurationError, InvalidInput
from durably.store.queues import QueueClaims
from durably.worker.claimer import Claimer
from durably.workflow.queue import parse_rate
from tests.helpers import eventually, scaled

PAIR = [("job", "v1")]


def _app(db_url: str, **limits: Any) -> tuple[Durably, Any]:
    app = Durably(db_url)
    q = app.queue("q", **limits)

    @app.workflow(name="job", version="v1", queue=q)
    async def job(ctx: Any, k: int) -> int:
        return k

    return app, job


async def _is(status: Any, wanted: str) -> bool:
    return bool(await status == wanted)


async def _claim(app: Durably, n: int, worker: str = "w") -> list[str]:
    rows = await QueueClaims(app.store).claim("q", worker, PAIR, n, 30.0)
    return [r["input"] for r in rows]


async def _declare(app: Durably) -> None:
    await app.open()
    await QueueClaims(app.store).declare(list(app.queues.values()))


async def test_concurrency_caps_running_runs(db_url: str) -> None:
    app, job = _app(db_url, concurrency=3)
    async with app:
        await _declare(app)
        for k in range(6):
            await job.start(k)
        assert set(await _claim(app, 10)) == {"0", "1", "2"}
        assert await _claim(app, 10, "other") == []
        # An unqueued claim never takes a queued run.
        assert await app.store.claim("w", PAIR, 10, 30.0) == []
        counts = {c["name"]: c for c in await app.queue_counts()}
        assert (counts["q"]["running"], counts["q"]["waiting"]) == (3, 3)
        assert [r.input for r in await app.list_runs(queue="q", status="running")] == [2, 1, 0]
        assert await app.list_runs(queue="other") == []


async def test_per_key_limit_passes_over_a_full_key(db_url: str) -> None:
    app, job = _app(db_url, per_key=1)
    async with app:
        await _declare(app)
        for k, key in enumerate(["a", "a", "a", "b", "a", "c"]):
            await job.start(k, concurrency_key=key)
        assert sorted(await _claim(app, 10)) == ["0", "3", "5"]  # one per key
        assert await _claim(app, 10) == []  # every key full
        await job.start(9)  # no key: only the queue's limits apply
        assert await _claim(app, 10) == ["9"]


async def test_rate_counts_first_claims_in_the_window(db_url: str) -> None:
    app, job = _app(db_url, rate="2/1h")
    async with app:
        await _declare(app)
        for k in range(4):
            await job.start(k)
        assert set(await _claim(app, 10)) == {"0", "1"}
        assert await _claim(app, 10) == []
        next_at, now = await QueueClaims(app.store).next_at("q", PAIR)
        assert next_at is not None and next_at > now  # a lease's end, or the window's


async def test_priority_first_then_fifo(db_url: str) -> None:
    app, job = _app(db_url, concurrency=10, priority=True)
    async with app:
        await _declare(app)
        for k, prio in enumerate([0, 5, 1, 5, 0, 9]):
            await job.start(k, priority=prio)
        assert set(await _claim(app, 2)) == {"5", "1"}
        assert set(await _claim(app, 3)) == {"3", "2", "0"}
        assert set(await _claim(app, 3)) == {"4"}


async def test_a_parked_run_holds_no_slot(db_url: str) -> None:
    app = Durably(db_url)
    q = app.queue("q", concurrency=1)

    @app.workflow(name="sleepy", queue=q)
    async def sleepy(ctx: Any, k: int) -> int:
        if k == 0:
            await ctx.step.wait_for_signal("go")
        return k

    async with app, app.worker(concurrency=4):
        first = await sleepy.start(0)
        await eventually(first.status, what="the first run")
        await eventually(lambda: _is(first.status(), "waiting"), what="the first run to wait")
        second = await sleepy.start(1)
        assert await second.result(timeout=scaled(15)) == 1  # ran while the first waited
        assert await first.status() == "waiting"
        await app.send_signal("go")
        assert await first.result(timeout=scaled(15)) == 0


async def test_bad_declarations_and_options_are_refused(db_url: str) -> None:
    app = Durably(db_url)
    for bad in ({"concurrency": 0}, {"per_key": -1}, {"rate": "ten per minute"},
                {"rate": "0/1m"}, {"rate": "5/0s"}, {"concurrency": 2.5}):  # fmt: skip
        with pytest.raises(ConfigurationError):
            app.queue("q", **bad)
    with pytest.raises(ConfigurationError, match="unknown queue"):
        app.workflow(name="x", queue="nope")
    plain_q = app.queue("plain", concurrency=2)
    with pytest.raises(ConfigurationError, match="already declared"):
        app.queue("plain", concurrency=3)

    @app.workflow(name="plain", queue=plain_q)
    async def plain(ctx: Any) -> None:
        return None

    @app.workflow(name="free")
    async def free(ctx: Any) -> None:
        return None

    async with app:
        with pytest.raises(InvalidInput, match="priority=True"):
            await plain.start(priority=3)
        with pytest.raises(InvalidInput, match="has no queue"):
            await free.start(concurrency_key="k")
        assert await app.list_runs() == []
    assert parse_rate("10/1m") == (10, 60.0)
    assert parse_rate("3/s") == (3, 1.0)


async def test_a_dead_workers_runs_are_taken_over_in_a_full_queue(db_url: str) -> None:
    app, job = _app(db_url, concurrency=1)
    async with app:
        await _declare(app)
        await job.start(0)
        await job.start(1)
        rows = await QueueClaims(app.store).claim("q", "dead", PAIR, 5, 0.2)
        assert [r["input"] for r in rows] == ["0"]
        assert await _claim(app, 5, "alive") == []  # full: "dead" holds the slot

        async def taken() -> list[str]:
            return await _claim(app, 5, "alive")

        assert await eventually(taken, timeout=5, what="the expired run") == ["0"]
        run = (await app.list_runs(queue="q", status="running"))[0]
        assert run.worker_id == "alive" and run.input == 0


def _moved_app(db_url: str, queue: str | None) -> tuple[Durably, Any]:
    """The app of one deploy: workflow `job` in `queue` (None: in no queue)."""
    app = Durably(db_url)
    q = app.queue(queue, concurrency=1) if queue is not None else None

    @app.workflow(name="job", version="v1", queue=q)
    async def job(ctx: Any, k: int) -> int:
        return k

    return app, job


async def test_runs_of_a_queue_no_worker_declares_are_claimed_unqueued(db_url: str) -> None:
    """A queue renamed or removed in a deploy does not strand its runs: once no worker
    declares it, an unqueued claim takes them (running ones too, once their lease ends)."""
    old, job = _moved_app(db_url, "old")
    new, _ = _moved_app(db_url, None)
    async with old, new:
        for k in range(3):
            await job.start(k)  # started by a client; no worker ever declared "old"
        # A run held by a worker of the old deploy that died: running, its lease ended.
        await QueueClaims(old.store).declare(list(old.queues.values()), ttl_s=0.3)
        held = await QueueClaims(old.store).claim("old", "dead", PAIR, 1, 0.2)
        assert [r["input"] for r in held] == ["0"]
        # While "old" is declared, the unqueued claim leaves its runs to the queue.
        assert await new.store.claim("w", PAIR, 10, 30.0) == []

        async def claimed() -> list[Any]:
            return await new.store.claim("w", PAIR, 10, 30.0)

        rows = await eventually(claimed, timeout=5, what="the runs of the lapsed queue")
        got = {r["input"] for r in rows}
        if got != {"0", "1", "2"}:  # the dead worker's run waits for its lease to end
            rows = await eventually(claimed, timeout=5, what="the dead worker's run")
            got |= {r["input"] for r in rows}
        assert got == {"0", "1", "2"}
        runs = await new.list_runs(status="running")
        assert {r.worker_id for r in runs} == {"w"} and {r.queue for r in runs} == {"old"}


async def test_a_declared_queue_keeps_its_runs_from_unqueued_claims(db_url: str) -> None:
    app, job = _moved_app(db_url, "live")
    other, _ = _moved_app(db_url, None)
    async with app, other:
        await QueueClaims(app.store).declare(list(app.queues.values()), ttl_s=30.0)
        for k in range(2):
            await job.start(k)
        assert await other.store.claim("w", PAIR, 10, 30.0) == []
        # A queued claim renews the declaration: its limit still holds.
        assert [r["input"] for r in await QueueClaims(app.store).claim(
            "live", "w", PAIR, 10, 30.0)] == ["0"]  # fmt: skip
        assert await other.store.claim("w", PAIR, 10, 30.0) == []


async def test_a_canceled_run_compensating_holds_its_slot(db_url: str) -> None:
    """Compensations run code: a canceled run undoing its steps counts toward its queue's
    concurrency like a running one."""
    app = Durably(db_url)
    q = app.queue("q", concurrency=1)

    def undo(value: int) -> None:
        return None

    @app.workflow(name="job", version="v1", queue=q)
    async def job(ctx: Any, k: int) -> int:
        if k == 0:
            await ctx.step.run("do", lambda: 1, compensate=undo)
            await ctx.step.wait_for_signal("never")
        return k

    async with app:
        first = await job.start(0)
        async with app.worker(concurrency=2):
            await eventually(lambda: _is(first.status(), "waiting"), what="the first run")
        await app.cancel(first.run_id)
        claims = QueueClaims(app.store)
        rows = await claims.claim("q", "undoing", PAIR, 5, 30.0)
        assert [r["id"] for r in rows] == [first.run_id]  # its compensations, to run
        await job.start(1)
        assert await claims.claim("q", "other", PAIR, 5, 30.0) == []  # the slot is held


async def test_next_due_counts_the_runs_of_a_queue_no_worker_declares(db_url: str) -> None:
    """An idle worker learns when a lapsed queue's run comes due (not only by the poll),
    and its next claim then looks at unqueued runs even if all its workflows are queued."""
    live, in_live = _moved_app(db_url, "live")
    old, in_old = _moved_app(db_url, "old")
    new, _ = _moved_app(db_url, "renamed")
    async with live, old, new:
        await QueueClaims(live.store).declare(list(live.queues.values()), ttl_s=30.0)
        await in_live.start(1, available_at="+1h")  # the queue's own look covers it
        handle = await in_old.start(2, available_at="+2h")  # no worker ever declared "old"
        at = (await new.get_run(handle.run_id)).available_at
        assert at is not None
        assert (await new.store.next_due(PAIR))[0] == at
        claimer = Claimer(new, "w", 30.0)
        assert (await claimer.next_due())[0] == at
        assert claimer._unqueued_gave  # every workflow of `new` is queued: look anyway


async def test_a_workflow_moved_to_another_queue_leaves_no_run_behind(db_url: str) -> None:
    # Found by review: `ship` moved from "slow" to "fast" while `bill` keeps "slow"
    # declared; the runs `ship` started in "slow" matched neither claim.
    def deploy(ship_queue: str | None) -> tuple[Durably, Any, Any]:
        app = Durably(db_url)
        slow = app.queue("slow", concurrency=1)
        moved = app.queue(ship_queue, concurrency=1) if ship_queue else None

        @app.workflow(name="bill", version="v1", queue=slow)
        async def bill(ctx: Any, k: int) -> int:
            return k

        @app.workflow(name="ship", version="v1", queue=moved if ship_queue else None)
        async def ship(ctx: Any, k: int) -> int:
            return k

        return app, bill, ship

    old, _, old_ship = deploy("slow")
    async with old:
        started = [await old_ship.start(k) for k in range(2)]  # both in "slow"
    for ship_queue in ("fast", None):
        new, bill, _ = deploy(ship_queue)
        async with new, new.worker():
            assert await (await bill.start(9)).result(timeout=scaled(10)) == 9
            handle = new.handle(started.pop().run_id)
            assert await handle.result(timeout=scaled(10)) in (0, 1)


async def test_a_moved_workflows_runs_are_claimed_by_its_workers_in_a_queue_they_left(
    db_url: str,
) -> None:
    # Found by review: `ship` moved from "slow" to "fast"; the workers that still declare
    # "slow" do not serve `ship`, and those that serve `ship` do not declare "slow".
    def deploy(workflows: dict[str, str]) -> tuple[Durably, dict[str, Any]]:
        app = Durably(db_url)
        made = {}
        for name, queue in workflows.items():

            async def body(ctx: Any, k: int) -> int:
                return k

            made[name] = app.workflow(name=name, version="v1",
                                      queue=app.queue(queue, concurrency=1))(body)  # fmt: skip
        return app, made

    old, made = deploy({"ship": "slow", "bill": "slow"})
    async with old:
        stranded = await made["ship"].start(7)
    billing, _ = deploy({"bill": "slow"})
    shipping, _ = deploy({"ship": "fast"})
    async with billing, shipping, billing.worker():
        # As billing's worker does as it starts (and renews): "slow" is declared, so the
        # runs left in it are not a lapsed queue's, which any worker would take.
        await QueueClaims(billing.store).declare(list(billing.queues.values()), 60.0)
        async with shipping.worker():
            assert await shipping.handle(stranded.run_id).result(timeout=scaled(10)) == 7
