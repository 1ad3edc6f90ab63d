"""Races of the group commit of run ends (`finish_many`) found by review: two ends of one
run in one batch, a value that cannot be stored, and lock orders against the heartbeat
and against the group commit of records."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest

from durably import Durably, LeaseLostError, StepContext
from durably.core.errors import PayloadTooLarge, describe
from durably.store.records import Lease, NewRun, PendingStep, RunEnd
from tests.helpers import eventually, scaled

PAIR = [("wf", "v1")]


def _app(url: str) -> Durably:
    app = Durably(url)

    @app.workflow(name="wf", version="v1")
    async def wf(ctx: Any) -> None:
        return None

    return app


async def _new(app: Durably, run_id: str, parent: str | None = None) -> None:
    await app.store.create_run(NewRun("wf", "v1", "null", 3, run_id=run_id, parent_run_id=parent))


async def _lock_waits(url: str, count: int) -> bool:
    """At least `count` other sessions of this database wait for a row lock."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        )
        row = await cur.fetchone()
        return row is not None and row[0] >= count


@pytest.mark.parametrize("stale_first", [True, False])
async def test_two_ends_of_one_run_in_one_batch_only_the_current_fence_counts(
    db_url: str, stale_first: bool
) -> None:
    # An old execution's end still queued while the same worker claimed the run again.
    app = _app(db_url)
    async with app:
        await _new(app, "r1")
        [row] = await app.store.claim("w", PAIR, 1, 30.0)
        old = Lease("r1", row["fence"], "w")
        async with app.store.db.transaction() as tx:  # its lease ran out in the database
            await tx.fetch("release", run_id="r1", fence=old.fence, worker_id="w")
        [row] = await app.store.claim("w", PAIR, 1, 30.0)
        new = Lease("r1", row["fence"], "w")
        stale = PendingStep(0, 1, "stale", "function", "completed", output_json='"OLD"', seq=1)
        ends = [RunEnd(old, "failed", None, {"type": "Stale", "message": "old"}, [stale]),
                RunEnd(new, "completed", '"NEW"', None, [])]  # fmt: skip
        if not stale_first:
            ends.reverse()
        assert await app.store.ends.finish_many("w", ends) == {"r1"}
        run = await app.store.get_run("r1")
        assert (run.status, run.output, run.error) == ("completed", "NEW", None)
        assert await app.store.list_steps("r1") == []


async def test_an_end_that_cannot_be_stored_fails_alone() -> None:
    huge = {"type": "E", "message": "x" * (1100 * 1024)}
    with pytest.raises(PayloadTooLarge):  # at once, in its own run's execution
        RunEnd(Lease("r", 1, "w"), "failed", None, huge)
    # And an error message of any size is cut to what people can read.
    stored = describe(ValueError("y" * (2 * 1024 * 1024)))
    assert len(stored["message"]) < 20_000 and "characters cut" in stored["message"]
    RunEnd(Lease("r", 1, "w"), "failed", None, stored)


async def test_the_end_of_a_child_locks_its_parent_in_the_heartbeats_order(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The heartbeat locks a, b, c in id order; the child c's end also wakes its parent a.
    caplog.set_level(logging.INFO, logger="durably")
    app = _app(pg_url)
    async with app:
        await _new(app, "a-parent")
        await _new(app, "b-other")
        await _new(app, "c-child", parent="a-parent")
        assert len(await app.store.claim("w", PAIR, 10, 30.0)) == 3
        schema = app.connector.schema
        async with await psycopg.AsyncConnection.connect(pg_url) as blocker:
            await blocker.execute(f"SELECT 1 FROM {schema}.runs WHERE id = 'b-other' FOR SHARE")
            held = {r: 1 for r in ("a-parent", "b-other", "c-child")}
            beat = asyncio.create_task(app.store.heartbeat("w", held, 30.0))
            await eventually(lambda: _lock_waits(pg_url, 1), what="the heartbeat to wait on b")
            end = asyncio.create_task(app.store.ends.finish_many(
                "w", [RunEnd(Lease("c-child", 1, "w"), "completed", "1")]
            ))  # fmt: skip
            await eventually(lambda: _lock_waits(pg_url, 2), what="the end to wait")
            await blocker.rollback()
        await asyncio.gather(beat, end)
        assert end.result() == {"c-child"}
    assert not [r for r in caplog.records if "deadlock" in r.getMessage()]


async def test_records_and_ends_insert_step_rows_in_one_order(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durably")
    app = _app(pg_url)
    async with app:
        await _new(app, "r1")
        await _new(app, "r2")
        rows = {r["id"]: r for r in await app.store.claim("w", PAIR, 10, 30.0)}
        l1, l2 = (Lease(k, rows[k]["fence"], "w") for k in ("r1", "r2"))
        x = PendingStep(0, 1, "x", "function", "completed", "1", seq=1)
        y = PendingStep(0, 1, "y", "function", "completed", "2", seq=1)
        schema = app.connector.schema
        async with await psycopg.AsyncConnection.connect(pg_url) as blocker:
            # The blocker holds r1's record's key: both statements line up behind it.
            await blocker.execute(
                f"INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind,"
                " status, fence, worker_id) VALUES ('r1', 0, 1, 'z', 'function', 'running', 1,"
                " 'w')"
            )
            records = asyncio.create_task(app.store.steps.record_many("w", [(l2, y), (l1, x)]))
            await eventually(lambda: _lock_waits(pg_url, 1), what="the records to wait")
            ends = asyncio.create_task(app.store.ends.finish_many("w", [
                RunEnd(l1, "completed", "1", None, [x]), RunEnd(l2, "completed", "2", None, [y]),
            ]))  # fmt: skip
            await eventually(lambda: _lock_waits(pg_url, 2), what="the ends to wait")
            await blocker.rollback()
        await asyncio.gather(records, ends, return_exceptions=True)
        assert ends.result() == {"r1", "r2"}
    assert not [r for r in caplog.records if "deadlock" in r.getMessage()]


async def test_a_cancel_that_refuses_the_end_undoes_a_step_whose_record_was_in_flight(
    db_url: str,
) -> None:
    """SPEC §4.12: a cancel that arrives after a body returned records it completed, and
    its undo runs. Here the cancel lands as the run ends, so the end (which carries the
    records still in flight) is refused; on PostgreSQL a second session holds the key of
    the step's record, so that record is still waiting when the compensations are
    computed. Every record in flight must be durable before then."""
    app = Durably(db_url)
    undone: list[str] = []
    go = asyncio.Event()
    blocker: psycopg.Connection[Any] | None = None
    if not db_url.startswith("sqlite"):
        blocker = psycopg.connect(db_url)  # sync: the step body below must not yield
    schema = app.connector.schema

    async def charge(ctx: StepContext) -> str:
        if blocker is not None:  # the record of this attempt waits behind this row
            blocker.execute(
                f"INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind,"
                " status, fence, worker_id) VALUES (%s, 1, 1, 'charge', 'function', 'running',"
                " 1, 'w')", (ctx.run_id,),
            )  # fmt: skip
        return "charged"

    async def loser(ctx: StepContext) -> None:
        try:
            await go.wait()
        except asyncio.CancelledError:  # the run ends: the cancel arrives right now
            await app.cancel(ctx.run_id)
            raise

    def undo(value: str) -> None:
        undone.append(value)

    @app.workflow(name="pay", version="v1")
    async def pay(ctx: Any) -> str:
        _, value = await ctx.wait_first(
            ctx.step.run("charge", charge, compensate=undo), ctx.step.run("loser", loser)
        )
        return str(value)

    try:
        async with app, app.worker():
            handle = await pay.start()
            if blocker is not None:

                async def compensating_or_ended() -> bool:
                    run = await app.get_run(handle.run_id)
                    return run.finished_at is not None or await _lock_waits(db_url, 2)

                await eventually(compensating_or_ended, what="the end refused, then")
                blocker.rollback()
            run = await handle.wait(timeout=scaled(20))
            steps = {s.step: s.status for s in await app.list_steps(handle.run_id)}
    finally:
        if blocker is not None:
            blocker.close()
    assert run.status == "canceled"
    assert undone == ["charged"]
    assert steps == {"charge": "completed", "loser": "canceled", "compensate:charge": "completed"}


class _CountingStore:
    """Which records reach `record_many` (the records' own statement)."""

    def __init__(self, app: Durably) -> None:
        self.written: list[str] = []
        store = app.store
        original = store.steps.record_many

        async def record_many(worker_id: str, batch: list[tuple[Lease, PendingStep]]) -> Any:
            self.written += [step.name for _, step in batch]
            return await original(worker_id, batch)

        store.steps.record_many = record_many  # type: ignore[method-assign,assignment]


@pytest.mark.parametrize("refused", [False, True])
async def test_a_record_still_waiting_for_its_batch_goes_with_its_runs_end(
    db_url: str, refused: bool
) -> None:
    from durably.store.recorder import StepRecorder

    app = _app(db_url)
    async with app:
        counting = _CountingStore(app)
        await _new(app, "r1")
        [row] = await app.store.claim("w", PAIR, 1, 30.0)
        lease = Lease("r1", row["fence"], "w")
        if refused:  # canceled meanwhile: the end is refused, the records are still written
            await app.cancel("r1")
        recorder = StepRecorder(app.store, "w")
        first = PendingStep(0, 1, "first", "function", "completed", output_json="1", seq=1)
        second = PendingStep(1, 1, "second", "function", "completed", output_json="2", seq=2)
        await recorder.record(lease, first)  # written on its own
        waiting = asyncio.create_task(recorder.record(lease, second))
        await asyncio.sleep(0)  # it is queued for the loop's next turn: the end comes first
        end = RunEnd(lease, "completed", '"done"', None, [first, second])
        assert await recorder.finish(end) is not refused
        await waiting
        steps = {s.step: s.status for s in await app.store.list_steps("r1")}
        assert steps == {"first": "completed", "second": "completed"}
        # The waiting record was written once: by the end, or (refused) on its own.
        assert counting.written.count("second") == (1 if refused else 0)
        assert counting.written.count("first") == 1


async def test_a_record_the_end_does_not_carry_is_not_taken_for_written(db_url: str) -> None:
    """Only what the end carries rides with it: a failed attempt's record queued beside it
    (not a record the end knows of) goes on its own, and is said written only if it is
    (it races the end: the execution waits for such records before it ends a run)."""
    from durably.store.recorder import StepRecorder

    app = _app(db_url)
    async with app:
        await _new(app, "r1")
        [row] = await app.store.claim("w", PAIR, 1, 30.0)
        lease = Lease("r1", row["fence"], "w")
        recorder = StepRecorder(app.store, "w")
        failed = PendingStep(1, 1, "flaky", "function", "failed",
                             error={"type": "E", "message": "boom"})  # fmt: skip
        recording = asyncio.create_task(recorder.record(lease, failed))
        await asyncio.sleep(0)  # queued for the loop's next turn: the end comes first
        assert await recorder.finish(RunEnd(lease, "completed", '"done"', None, []))
        written = await asyncio.gather(recording, return_exceptions=True)
        steps = {s.step: s.status for s in await app.store.list_steps("r1")}
        if isinstance(written[0], LeaseLostError):  # the end came first
            assert "flaky" not in steps
        else:
            assert written[0] == "running" and steps.get("flaky") == "failed"
