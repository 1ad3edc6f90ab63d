"""Sagas (SPEC §4.10, issue 31 item 3), in process, on both backends: a transaction's undo
is a transaction of its own, run once, newest first with the function steps' undos, when
the run is canceled or fails for good; `ctx.step.compensate()` undoes now and the workflow
goes on; nothing is ever undone twice, live or replayed. (A kill -9 in the middle of an
undo's transaction: tests/acceptance/test_sagas.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from durably import Durably, RetryPolicy, StepFailedError, SyncWorkflowContext, WorkflowContext
from durably.execution import lifecycles as _lifecycles
from tests.helpers import AppThread, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)


# ------------------------------------------------------------------ a business table


def _payments_table(url: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS biz_payments (order_id TEXT, what TEXT)")
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA IF NOT EXISTS biz")
            conn.execute("CREATE TABLE IF NOT EXISTS biz.payments (order_id text, what text)")


def _payments(url: str) -> list[tuple[str, str]]:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return list(conn.execute("SELECT order_id, what FROM biz_payments ORDER BY rowid"))
    with psycopg.connect(url) as conn:
        return list(conn.execute("SELECT order_id, what FROM biz.payments ORDER BY ctid"))


async def _write(conn: Any, order_id: str, what: str) -> None:
    if isinstance(conn, sqlite3.Connection):
        conn.execute("INSERT INTO biz_payments VALUES (?, ?)", (order_id, what))
    else:
        await conn.execute("INSERT INTO biz.payments VALUES (%s, %s)", (order_id, what))


async def charge(conn: Any, order_id: str) -> str:
    await _write(conn, order_id, "charge")
    return order_id


async def refund(conn: Any, order_id: str) -> None:
    await _write(conn, order_id, "refund")


async def _steps(app: Durably, run_id: str) -> dict[str, tuple[str, str]]:
    return {s.step: (s.kind, s.status) for s in await app.list_steps(run_id)}


async def _waiting(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting"


# ------------------------------------------------------------------ transaction undos


async def test_a_transaction_s_undo_runs_once_as_its_own_transaction_on_cancel(
    db_url: str,
) -> None:
    """Its first attempt writes, then fails: that write rolls back with it (a transaction of
    its own, not the engine's autocommit), and the retry's write commits with its record."""
    _payments_table(db_url)
    app = Durably(db_url)
    tries: list[type] = []
    bodies: list[type] = []

    async def charge_it(conn: Any, order_id: str) -> str:
        bodies.append(type(conn))
        return await charge(conn, order_id)

    async def flaky_refund(conn: Any, order_id: str) -> None:
        await _write(conn, order_id, "refund")
        tries.append(type(conn))
        if len(tries) == 1:
            raise RuntimeError("the bank is down")

    @app.workflow(name="pay", version="v1")
    async def pay(ctx: WorkflowContext, order_id: str) -> None:
        await ctx.step.transaction("charge", charge_it, order_id, compensate=flaky_refund)
        await ctx.step.wait_for_signal("approved")

    async with app, app.worker():
        handle = await pay.start("o1")
        await eventually(lambda: _waiting(app, handle.run_id), what="the approval wait")
        await app.cancel(handle.run_id)
        await eventually(lambda: _compensated(app, handle.run_id), timeout=20,
                         what="the compensation")  # fmt: skip
        steps = [(s.step, s.kind, s.status, s.attempt) for s in await app.list_steps(handle.run_id)]
    assert _payments(db_url) == [("o1", "charge"), ("o1", "refund")]
    assert tries == bodies * 2  # the same connection type as the step's body
    assert [s for s in steps if s[0] == "compensate:charge"] == [
        ("compensate:charge", "transaction", "failed", 1),
        ("compensate:charge", "transaction", "completed", 2),
    ]


async def _compensated(app: Durably, run_id: str) -> bool:
    run = await app.get_run(run_id)
    return run.status == "canceled" and not run.compensating


async def test_a_transaction_s_undo_runs_once_when_the_run_fails_for_good(db_url: str) -> None:
    _payments_table(db_url)
    app = Durably(db_url)

    async def ship() -> None:
        raise RuntimeError("no courier")

    @app.workflow(name="pay", version="v1")
    async def pay(ctx: WorkflowContext, order_id: str) -> None:
        await ctx.step.transaction("charge", charge, order_id, compensate=refund)
        await ctx.step.sleep("replay", "10ms")  # the next claim replays the charge
        await ctx.step.run("ship", ship, retry=ONCE)

    async with app, app.worker():
        run = await (await pay.start("o2")).wait(timeout=scaled(20))
        steps = await _steps(app, run.run_id)
    assert run.status == "failed"
    assert _payments(db_url) == [("o2", "charge"), ("o2", "refund")]
    assert steps["compensate:charge"] == ("transaction", "completed")


async def test_undos_run_newest_first_transactions_and_functions_alike(db_url: str) -> None:
    _payments_table(db_url)
    app = Durably(db_url)
    order: list[str] = []

    def body(name: str) -> str:
        return name

    async def tx_body(conn: Any, name: str) -> str:
        await _write(conn, name, "do")
        return name

    async def tx_undo(conn: Any, name: str) -> None:
        await _write(conn, name, "undo")
        order.append(name)

    async def broken() -> None:
        raise RuntimeError("boom")

    @app.workflow(name="mixed", version="v1")
    async def mixed(ctx: WorkflowContext) -> None:
        await ctx.step.run("a", body, "a", compensate=order.append)
        await ctx.step.transaction("b", tx_body, "b", compensate=tx_undo)
        await ctx.step.run("plain", body, "plain")
        await ctx.step.sleep("nap", "10ms")
        await ctx.step.transaction("c", tx_body, "c", compensate=tx_undo)
        await ctx.step.run("d", body, "d", compensate=order.append)
        await ctx.step.run("x", broken, retry=ONCE)

    async with app, app.worker():
        run = await (await mixed.start()).wait(timeout=scaled(20))
    assert run.status == "failed"
    assert order == ["d", "c", "b", "a"]
    assert [p for p in _payments(db_url) if p[1] == "undo"] == [("c", "undo"), ("b", "undo")]


class Payment(BaseModel):
    order_id: str
    amount: int


async def test_an_undo_receives_the_result_as_the_workflow_does_typed(db_url: str) -> None:
    """`undo(conn, result)` is typed with `fn`'s result: it gets the model the workflow got
    (not its JSON), live and on replay (the cancel comes to a parked run: a new claim)."""
    _payments_table(db_url)
    app = Durably(db_url)
    got: list[object] = []

    async def pay_it(conn: Any, order_id: str) -> Payment:
        await _write(conn, order_id, "charge")
        return Payment(order_id=order_id, amount=42)

    async def refund_it(conn: Any, payment: Payment) -> None:
        got.append(payment)
        await _write(conn, payment.order_id, "refund")

    def hold(order_id: str) -> Payment:
        return Payment(order_id=order_id, amount=1)

    @app.workflow(name="typed", version="v1")
    async def typed(ctx: WorkflowContext, order_id: str) -> list[str]:
        await ctx.step.run("hold", hold, order_id, compensate=got.append)
        await ctx.step.transaction("charge", pay_it, order_id, compensate=refund_it)
        if order_id == "now":
            return await ctx.step.compensate()
        await ctx.step.wait_for_signal("never")
        return []

    async with app, app.worker():
        now = await (await typed.start("now")).wait(timeout=scaled(20))
        assert now.status == "completed", now.error
        handle = await typed.start("later")
        await eventually(lambda: _waiting(app, handle.run_id), what="the wait")
        await app.cancel(handle.run_id)
        await eventually(lambda: _compensated(app, handle.run_id), what="the compensation")
    assert got == [
        Payment(order_id="now", amount=42), Payment(order_id="now", amount=1),
        Payment(order_id="later", amount=42), Payment(order_id="later", amount=1),
    ]  # fmt: skip


# ------------------------------------------------------------------ compensate() now


async def test_compensate_undoes_now_and_the_workflow_returns_normally(db_url: str) -> None:
    """A rejected order: its stock released, its payment refunded, then it returns."""
    _payments_table(db_url)
    app = Durably(db_url)
    released: list[str] = []

    def reserve(order_id: str) -> str:
        return f"stock:{order_id}"

    @app.workflow(name="order", version="v1")
    async def order(ctx: WorkflowContext, order_id: str) -> dict[str, Any]:
        await ctx.step.run("reserve", reserve, order_id, compensate=released.append)
        await ctx.step.transaction("charge", charge, order_id, compensate=refund)
        approved = await ctx.step.wait_for_signal(f"approval:{order_id}")
        if not approved:
            undone = await ctx.step.compensate()
            await ctx.step.sleep("replay", "10ms")  # the next claim replays compensate()
            return {"status": "rejected", "undone": undone}
        return {"status": "done"}

    async with app, app.worker():
        handle = await order.start("o3")
        await eventually(lambda: _waiting(app, handle.run_id), what="the approval wait")
        await app.send_signal("approval:o3", False)
        run = await handle.wait(timeout=scaled(20))
        steps = await _steps(app, run.run_id)
    assert run.status == "completed", run.error
    assert run.output == {"status": "rejected", "undone": ["charge", "reserve"]}
    assert released == ["stock:o3"]
    assert _payments(db_url) == [("o3", "charge"), ("o3", "refund")]
    assert steps["compensate"] == ("compensate", "completed")
    assert steps["compensate:charge"] == ("transaction", "completed")
    assert steps["compensate:reserve"] == ("function", "completed")


async def test_a_step_undone_by_compensate_is_not_undone_again_at_a_later_failure(
    db_url: str,
) -> None:
    app = Durably(db_url)
    undone: list[str] = []

    def body(name: str) -> str:
        return name

    def broken() -> None:
        raise RuntimeError("boom")

    @app.workflow(name="twice", version="v1")
    async def twice(ctx: WorkflowContext) -> None:
        await ctx.step.run("a", body, "a", compensate=undone.append)
        assert await ctx.step.compensate() == ["a"]
        await ctx.step.run("b", body, "b", compensate=undone.append)
        await ctx.step.sleep("nap", "10ms")  # replayed: the first compensate() from history
        assert await ctx.step.compensate() == ["b"]
        assert await ctx.step.compensate() == []
        await ctx.step.run("c", body, "c", compensate=undone.append)
        await ctx.step.run("x", broken, retry=ONCE)

    async with app, app.worker():
        run = await (await twice.start()).wait(timeout=scaled(20))
    assert run.status == "failed" and "boom" in str(run.error)
    assert undone == ["a", "b", "c"]


async def test_a_step_undone_by_compensate_is_not_undone_again_at_a_cancel(db_url: str) -> None:
    app = Durably(db_url)
    undone: list[str] = []

    def body(name: str) -> str:
        return name

    @app.workflow(name="then-cancel", version="v1")
    async def then_cancel(ctx: WorkflowContext) -> None:
        await ctx.step.run("a", body, "a", compensate=undone.append)
        await ctx.step.compensate()
        await ctx.step.run("b", body, "b", compensate=undone.append)
        await ctx.step.wait_for_signal("never")

    async with app, app.worker():
        handle = await then_cancel.start()
        await eventually(lambda: _waiting(app, handle.run_id), what="the wait")
        await app.cancel(handle.run_id)
        await eventually(lambda: _compensated(app, handle.run_id), what="the compensation")
    assert undone == ["a", "b"]


async def test_a_workflow_retry_after_compensate_does_not_undo_again(db_url: str) -> None:
    """The retry replays the steps before the failure, compensate() and its undos too: its
    own failure for good then undoes nothing twice."""
    app = Durably(db_url)
    undone: list[str] = []
    attempts: list[int] = []

    def body(name: str) -> str:
        return name

    twice = RetryPolicy(max_attempts=2, initial_interval="10ms")

    @app.workflow(name="retried", version="v1", retry=twice)
    async def retried(ctx: WorkflowContext) -> str:
        attempts.append(ctx.attempt)
        await ctx.step.run("a", body, "a", compensate=undone.append)
        await ctx.step.compensate()
        await ctx.step.run("b", body, "b", compensate=undone.append)
        raise RuntimeError(f"the workflow's own failure, attempt {ctx.attempt}")

    async with app, app.worker():
        run = await (await retried.start()).wait(timeout=scaled(20))
    assert run.status == "failed" and "attempt 2" in str(run.error)
    assert attempts == [1, 2]
    assert undone == ["a", "b"]


async def test_compensate_names_what_it_covers_in_every_workflow_attempt(db_url: str) -> None:
    """A retry drops what came after a caught failure, compensate() included, and keeps
    the undo it ran: the retry's compensate() names the same step (undone once)."""
    app = Durably(db_url)
    undone: list[str] = []
    said: list[list[str]] = []

    def body(name: str) -> str:
        return name

    def flaky() -> None:
        raise RuntimeError("caught")

    twice = RetryPolicy(max_attempts=2, initial_interval="10ms")

    @app.workflow(name="retried", version="v1", retry=twice)
    async def retried(ctx: WorkflowContext) -> None:
        await ctx.step.run("a", body, "a", compensate=undone.append)
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("flaky", flaky, retry=ONCE)
        said.append(await ctx.step.compensate())
        raise RuntimeError(f"the workflow's own failure, attempt {ctx.attempt}")

    async with app, app.worker():
        run = await (await retried.start()).wait(timeout=scaled(20))
    assert run.status == "failed" and "attempt 2" in str(run.error)
    assert said == [["a"], ["a"]]
    assert undone == ["a"]


async def test_a_fork_after_compensate_does_not_undo_again(db_url: str) -> None:
    """A fork copies the log (compensate() included), not the undos' records: what the old
    run's compensate() undid is not undone again when the fork is canceled."""
    app = Durably(db_url)
    undone: list[str] = []

    def body(name: str) -> str:
        return name

    @app.workflow(name="forked", version="v1")
    async def forked(ctx: WorkflowContext) -> None:
        await ctx.step.run("a", body, "a", compensate=undone.append)
        await ctx.step.compensate()
        await ctx.step.run("b", body, "b", compensate=undone.append)
        await ctx.step.wait_for_signal("never")

    async with app, app.worker():
        old = await forked.start()
        await eventually(lambda: _waiting(app, old.run_id), what="the wait")
        await app.cancel(old.run_id)
        await eventually(lambda: _compensated(app, old.run_id), what="the compensation")
        assert undone == ["a", "b"]
        fork = await app.fork(old.run_id, from_position=2)
        await eventually(lambda: _waiting(app, fork.run_id), what="the fork's wait")
        await app.cancel(fork.run_id)
        await eventually(lambda: _compensated(app, fork.run_id), what="its compensation")
    assert undone == ["a", "b", "b"]  # b ran again in the fork: its own effect, undone


@pytest.mark.parametrize("replayed", [False, True])
async def test_an_undo_failing_for_good_fails_compensate_and_is_tried_again_at_the_end(
    db_url: str, replayed: bool
) -> None:
    """(`replayed`: the run parks after the failed compensate(), so the claim that fails it
    replays it: it knows b's undo is still to do, a's done.)"""
    app = Durably(db_url)
    undone: list[str] = []

    def body(name: str) -> str:
        return name

    class Refused(Exception):
        pass

    def stubborn(name: str) -> None:
        undone.append(name)
        from durably import NonRetryableError

        raise NonRetryableError(f"cannot undo {name}")

    @app.workflow(name="stubborn", version="v1")
    async def wf(ctx: WorkflowContext) -> str:
        await ctx.step.run("a", body, "a", compensate=undone.append)
        await ctx.step.run("b", body, "b", compensate=stubborn)
        try:
            await ctx.step.compensate()
        except StepFailedError as exc:
            assert exc.step == "compensate:b", exc.step
            if replayed:
                await ctx.step.sleep("nap", "10ms")
            raise Refused(str(exc)) from None
        return "not reached"

    async with app, app.worker():
        run = await (await wf.start()).wait(timeout=scaled(20))
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "Refused"
    assert undone == ["b", "a", "b"]  # a undone once; b given up, tried again at the end


# ------------------------------------------------------------------ undos are not let go of


async def test_a_workflow_retry_waits_for_a_compensate_still_undoing(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compensate() beside a step that fails (gather): the workflow fails and is retried,
    but not before the undo has ended and its record is written: the retry does not run it
    again (the engine waited for its lifecycles only `SETTLE_S`)."""
    monkeypatch.setattr(_lifecycles, "SETTLE_S", scaled(0.05))
    app = Durably(db_url)
    undone: list[str] = []
    attempts: list[int] = []

    async def slow_undo(name: str) -> None:
        undone.append(name)
        # Not a wait for a condition: long past SETTLE_S, or until the retry began.
        with contextlib.suppress(Exception):
            await eventually(lambda: len(attempts) > 1, timeout=1, what="a retry")

    def body(name: str) -> str:
        return name

    def broken() -> None:
        raise RuntimeError("boom")

    twice = RetryPolicy(max_attempts=2, initial_interval="10ms")

    @app.workflow(name="beside", version="v1", retry=twice)
    async def beside(ctx: WorkflowContext) -> None:
        attempts.append(ctx.attempt)
        await ctx.step.run("a", body, "a", compensate=slow_undo)
        await asyncio.gather(ctx.step.compensate(), ctx.step.run("x", broken, retry=ONCE))

    async with app, app.worker():
        run = await (await beside.start()).wait(timeout=scaled(20))
    assert run.status == "failed" and "boom" in str(run.error)
    assert attempts == [1, 2]
    assert undone == ["a"]


async def test_a_draining_worker_lets_a_run_go_only_once_its_compensate_has_undone(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync undo (a thread) still running when a drain halts the run: the run is kept
    until compensate() ends and is recorded, then released; the next worker replays it."""
    monkeypatch.setattr(_lifecycles, "SETTLE_S", scaled(0.2))
    app = Durably(db_url)
    undone: list[str] = []
    started, go = threading.Event(), threading.Event()

    def body(name: str) -> str:
        return name

    def slow_undo(name: str) -> None:
        undone.append(name)
        started.set()
        go.wait(scaled(60))

    @app.workflow(name="drained", version="v1")
    async def drained(ctx: WorkflowContext) -> list[str]:
        await ctx.step.run("a", body, "a", compensate=slow_undo)
        return await ctx.step.compensate()

    async with app:
        worker = app.worker(lease="120s", heartbeat="60s", shutdown_grace="0.1s")
        handle = await drained.start()
        running = asyncio.create_task(worker.run(install_signals=False))
        await eventually(started.is_set, what="the undo running")
        worker.stop()  # the drain: after its grace, the run is halted with a release
        # Not a wait for a condition: the defect needs the undo to outlast the settle time.
        await asyncio.sleep(0.1 + 2 * scaled(0.2))
        assert (await app.get_run(handle.run_id)).worker_id is not None  # not let go
        go.set()
        await asyncio.wait_for(running, scaled(30))
        async with app.worker():
            assert await handle.result(timeout=scaled(20)) == ["a"]
    assert undone == ["a"]


# ------------------------------------------------------------------ sync workflows


async def test_sync_workflows_have_transaction_undos_and_compensate(db_url: str) -> None:
    _payments_table(db_url)
    app = Durably(db_url)
    released: list[str] = []

    def reserve(order_id: str) -> str:
        return order_id

    @app.workflow(name="sync-order", version="v1")
    def order(ctx: SyncWorkflowContext, order_id: str) -> dict[str, Any]:
        ctx.step.run("reserve", reserve, order_id, compensate=released.append)
        ctx.step.transaction("charge", charge, order_id, compensate=refund)
        if not ctx.step.wait_for_signal(f"approval:{order_id}"):
            return {"status": "rejected", "undone": ctx.step.compensate()}
        ctx.step.wait_for_signal("never")
        return {"status": "done"}

    async with app, app.worker():
        rejected = await order.start("s1")
        await eventually(lambda: _waiting(app, rejected.run_id), what="the approval wait")
        await app.send_signal("approval:s1", False)
        run = await rejected.wait(timeout=scaled(20))
        assert run.output == {"status": "rejected", "undone": ["charge", "reserve"]}

        canceled = await order.start("s2")
        await eventually(lambda: _waiting(app, canceled.run_id), what="the approval wait")
        await app.send_signal("approval:s2", True)
        await eventually(lambda: _waiting(app, canceled.run_id), what="the second wait")
        await app.cancel(canceled.run_id)
        await eventually(lambda: _compensated(app, canceled.run_id), what="the compensation")
    assert released == ["s1", "s2"]
    assert _payments(db_url) == [
        ("s1", "charge"), ("s1", "refund"), ("s2", "charge"), ("s2", "refund")
    ]  # fmt: skip


# ------------------------------------------------------------------ generated sagas

STEP = st.sampled_from(["run", "tx", "plain", "compensate", "nap"])
PLAN = st.lists(STEP, max_size=8)
END = st.sampled_from(["complete", "fail", "cancel"])


def _model(plan: list[str], end: str) -> tuple[list[str], list[list[str]]]:
    """What is undone, in order, and what each compensate() returns."""
    undone: list[str] = []
    results: list[list[str]] = []
    pending: list[str] = []
    for i, op in enumerate(plan):
        if op in ("run", "tx"):
            pending.append(f"s{i}")
        elif op == "compensate":
            results.append(pending[::-1])
            undone += pending[::-1]
            pending = []
    if end != "complete":
        undone += pending[::-1]
    return undone, results


class _Saga(AppThread):
    """The saga app in a thread, for the whole test: each hypothesis example is one run of
    the plan it draws."""

    def __init__(self, url: str) -> None:
        self.undone: dict[str, list[str]] = {}
        app = Durably(url)

        def body(name: str) -> str:
            return name

        async def tx_body(conn: Any, name: str) -> str:
            return name

        def undo(name: str) -> None:
            self.undone.setdefault(name.split("/")[0], []).append(name.split("/")[1])

        async def tx_undo(conn: Any, name: str) -> None:
            undo(name)

        def broken() -> None:
            raise RuntimeError("the end")

        @app.workflow(name="saga", version="v1")
        async def saga(ctx: WorkflowContext, spec: dict[str, Any]) -> list[list[str]]:
            results: list[list[str]] = []
            for i, op in enumerate(spec["plan"]):
                tag = f"{spec['tag']}/s{i}"
                if op == "run":
                    await ctx.step.run(f"s{i}", body, tag, compensate=undo)
                elif op == "tx":
                    await ctx.step.transaction(f"s{i}", tx_body, tag, compensate=tx_undo)
                elif op == "plain":
                    await ctx.step.run(f"s{i}", body, tag)
                elif op == "compensate":
                    undone = await ctx.step.compensate()
                    results.append(undone)
                else:
                    await ctx.step.sleep(f"s{i}", "5ms")  # parks: all of it replays
            if spec["end"] == "fail":
                await ctx.step.run("end", broken, retry=ONCE)
            elif spec["end"] == "cancel":
                await ctx.step.wait_for_signal("never")
            return results

        self.saga = saga
        super().__init__(app, concurrency=2)

    def play(self, tag: str, plan: list[str], end: str) -> Any:
        async def go() -> Any:
            handle = await self.saga.start({"tag": tag, "plan": plan, "end": end})
            if end == "cancel":
                await eventually(lambda: _waits_for(self.app, handle.run_id, "never"),
                                 what="the last wait")  # fmt: skip
                await self.app.cancel(handle.run_id)
                await eventually(lambda: _compensated(self.app, handle.run_id),
                                 what="the compensations")  # fmt: skip
            return await handle.wait(timeout=scaled(20))

        return self.run(go())


async def _waits_for(app: Durably, run_id: str, signal: str) -> bool:
    run = await app.get_run(run_id)
    return run.status == "waiting" and signal in (run.waiting_for or "")


@pytest.fixture
def saga(db_url: str) -> Iterator[_Saga]:
    with _Saga(db_url) as running:
        yield running


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=PLAN, end=END)
def test_generated_sagas_undo_what_a_model_says_in_its_order(
    saga: _Saga, plan: list[str], end: str
) -> None:
    tag = f"r{len(saga.undone)}"
    saga.undone[tag] = []
    run = saga.play(tag, plan, end)
    undone, results = _model(plan, end)
    assert run.status == {"complete": "completed", "fail": "failed", "cancel": "canceled"}[end]
    assert saga.undone[tag] == undone
    if end == "complete":
        assert run.output == results
