"""Executing one claimed run: replay, run new steps, park, finish, compensate.

The workflow function runs as a task. Step calls found completed in history return their
stored result at once; a new step runs its body and records the outcome (fenced). A call
that must wait (sleep, signal, child, retry back-off) "suspends": it records what it waits
for and blocks forever. Once something suspended, new step bodies are deferred, the ones
in flight finish and are recorded, and then the run parks with the earliest wake time and
the task is dropped. The next claim replays from the start. So a run parked on a sleep
while a sibling step was in flight neither loses that step nor runs it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import _telemetry
from ._clock import Clock
from ._codec import decode, encode
from ._context import StepContext, WorkflowContext
from ._errors import (
    DatabaseUnavailable,
    DeadlineExceeded,
    LeaseLostError,
    NonDeterminismError,
    StepLimitExceeded,
    describe,
)
from ._recorder import StepRecorder
from ._replay import History
from ._store import Lease, PendingStep, Store
from .backends import Row

if TYPE_CHECKING:
    from ._workflow import Workflow

log = logging.getLogger("durably.worker")

CHILD_NAMESPACE = uuid.UUID("0b5a3a5e-7d0e-4a53-9a43-2f6b0d1c9e11")


class StopReplay(BaseException):
    """Internal: the end of history was reached while only collecting compensations."""


@dataclass
class Suspension:
    wake_at: datetime | None
    label: str
    retry: bool = False


@dataclass
class Compensation:
    position: int
    step: str
    undo: Callable[..., Any]
    value: Any


@dataclass
class Outcome:
    parked: bool = False
    value: Any = None
    error: BaseException | None = None


class Execution:
    """One claim of one run, from replay to park or finish."""

    def __init__(
        self,
        store: Store,
        workflow: Workflow,
        row: Row,
        worker_id: str,
        clock: Clock,
        threads: Executor | None,
        max_payload: int,
        max_step_attempts: int,
        recorder: StepRecorder,
        on_park: Callable[[float | None], None],
        heartbeat: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        from ._steps import StepApi

        self.store = store
        self.workflow = workflow
        self.row = row
        self.lease = Lease(row["id"], row["fence"], worker_id, row["attempts"])
        self.history = History.parse(row["history"], row["attempts"])
        self.clock = clock
        self.threads = threads
        self.max_payload = max_payload
        self.max_step_attempts = max_step_attempts
        self.recorder = recorder
        self.on_park = on_park
        self.heartbeat = heartbeat
        self._db_now: datetime = row["db_now"]
        self._mono_at_claim = clock.monotonic()
        self._position = 0
        self.in_flight = 0
        self.suspensions: list[Suspension] = []
        self.compensations: list[Compensation] = []
        self.collect_only = bool(row["compensating"]) and row["status"] == "canceled"
        self.step_contexts: set[StepContext] = set()
        self._pending: list[PendingStep] = []
        self._flush_lock = asyncio.Lock()
        self._settled: asyncio.Future[None] | None = None
        self._task_done: Callable[[], bool] = lambda: False
        self._deadline_hit = False
        self.steps = StepApi(self)

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    def now(self) -> datetime:
        """The database's time, estimated from the claim's `now()` and the elapsed time."""
        return self._db_now + timedelta(seconds=self.clock.monotonic() - self._mono_at_claim)

    def spend_attempt(self) -> None:
        """Count one more step attempt against the run's limit."""
        self.history.attempts += 1
        if self.history.attempts > self.max_step_attempts:
            raise StepLimitExceeded(
                f"run {self.run_id} reached its limit of {self.max_step_attempts} step attempts"
            )

    def defer_record(self, step: PendingStep) -> None:
        """Hold a completed step's record until the workflow's next call into the engine.

        Only deterministic workflow code runs in between, so nothing can depend on the
        record yet; if the workflow returns, the record rides with the run's end.
        """
        self._pending.append(step)

    async def flush(self) -> None:
        """Write the held step records; callers wait until every one of them is durable."""
        if not self._pending and not self._flush_lock.locked():
            return
        async with self._flush_lock:
            pending, self._pending = self._pending, []
            await asyncio.gather(*(self.recorder.record(self.lease, p) for p in pending))

    def next_position(self) -> int:
        self._position += 1
        return self._position

    def changed(self) -> None:
        """Something moved: wake `drive` if the task ended or all that is left waits."""
        settled = self._settled
        if settled is None or settled.done():
            return
        if self._task_done() or (self.suspensions and self.in_flight == 0):
            settled.set_result(None)

    def encode(self, value: Any, what: str) -> str:
        return encode(value, what, self.max_payload)

    # --------------------------------------------------------------- suspension

    async def suspend(self, wake_at: datetime | None, label: str, retry: bool = False) -> Any:
        """Ask to park until `wake_at` (None: until woken); never returns."""
        self.suspensions.append(Suspension(wake_at, label, retry))
        self.changed()
        await asyncio.get_running_loop().create_future()

    async def defer_if_parking(self) -> None:
        """New work waits for the next claim once the run is about to park."""
        if self.suspensions:
            await asyncio.get_running_loop().create_future()

    # --------------------------------------------------------------- the run

    async def execute(self) -> None:
        """Run the claim to its end: park, retry, finish, or give up on a lost lease."""
        try:
            with _telemetry.run_span(self.row):
                if self.collect_only:
                    await self._compensate_canceled()
                else:
                    await self._execute_workflow()
        except LeaseLostError as exc:
            log.warning("run %s: %s", self.run_id, exc)
        except DatabaseUnavailable as exc:
            log.warning("run %s: %s; it is left to be claimed again", self.run_id, exc)
        finally:
            for sctx in self.step_contexts:
                sctx.cancelled.set()

    async def _execute_workflow(self) -> None:
        deadline = self.row["deadline_at"]
        if deadline is not None and deadline <= self.now():
            outcome = Outcome(error=DeadlineExceeded(f"run passed its deadline {deadline}"))
        else:
            outcome = await self.drive(self._call_workflow(), deadline)
        if outcome.parked:
            return
        if outcome.error is None:
            out = self.encode(outcome.value, "the workflow's result")
            await self._finish("completed", output_json=out)
            return
        await self.flush()
        error = outcome.error
        attempts = self.row["attempts"]
        retryable = not isinstance(
            error, NonDeterminismError | DeadlineExceeded | StepLimitExceeded
        )
        if retryable and attempts < self.row["max_attempts"]:
            delay = self.workflow.retry.delay(attempts).total_seconds()
            await self.store.retry_run(self.lease, describe(error), delay)
            self.on_park(delay)
            return
        if (await self.drive(self._compensate(), None)).parked:
            return
        await self._finish("failed", error=describe(error))

    async def _finish(
        self, status: str, output_json: str | None = None, error: dict[str, Any] | None = None
    ) -> None:
        """End the run; a single held step record rides along, more are written first."""
        last = self._pending.pop() if len(self._pending) == 1 else None
        await self.flush()
        await self.store.finish_run(self.lease, status, output_json, error, last_step=last)

    async def _call_workflow(self) -> Any:
        wf = self.workflow
        ctx = WorkflowContext(
            run_id=self.run_id, workflow=wf.name, version=wf.version,
            attempt=self.row["attempts"], step=self.steps,
        )  # fmt: skip
        if not wf.takes_input:
            return await wf.fn(ctx)
        ctx.input = wf.parse_input(decode(self.row["input"]))
        return await wf.fn(ctx, ctx.input)

    async def drive(self, coro: Coroutine[Any, Any, Any], deadline: datetime | None) -> Outcome:
        """Run `coro` until it returns, raises, or everything left is waiting (then park)."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(coro)
        self._settled = loop.create_future()
        self._task_done = task.done
        task.add_done_callback(lambda _: self.changed())
        timer = None
        if deadline is not None:
            delay = (deadline - self.now()).total_seconds()
            timer = loop.call_later(max(delay, 0), self._hit_deadline, task)
        try:
            await self._settled
            if not task.done():  # everything left is waiting: park
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopReplay):
                    await task
                await self._park()
                return Outcome(parked=True)
            if self._deadline_hit:
                return Outcome(error=DeadlineExceeded(f"run passed its deadline {deadline}"))
            exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
            if isinstance(exc, LeaseLostError | DatabaseUnavailable):
                raise exc
            if isinstance(exc, StopReplay):
                return Outcome()
            return Outcome(value=None if exc else task.result(), error=exc)
        finally:
            if timer is not None:
                timer.cancel()
            if not task.done():
                task.cancel()
                for sctx in self.step_contexts:
                    sctx.cancelled.set()

    def _hit_deadline(self, task: asyncio.Task[Any]) -> None:
        self._deadline_hit = True
        for sctx in self.step_contexts:
            sctx.cancelled.set()
        task.cancel()

    async def _park(self) -> None:
        await self.flush()
        wakes = [s.wake_at for s in self.suspensions if s.wake_at is not None]
        wake_at = min(wakes) if wakes else None
        status = "pending" if all(s.retry for s in self.suspensions) else "waiting"
        label = ", ".join(dict.fromkeys(s.label for s in self.suspensions))
        available = await self.store.park(self.lease, status, wake_at, label[:500])
        if available is not None:
            self.on_park((available - self.now()).total_seconds())

    # --------------------------------------------------------------- compensation

    async def _compensate(self) -> None:
        done = self.history.compensations_done()
        for comp in reversed(self.compensations):
            if comp.position not in done:
                await self.steps.run_compensation(comp)

    async def _compensate_canceled(self) -> None:
        outcome = await self.drive(self._collect_then_compensate(), None)
        if outcome.parked:
            return
        if outcome.error is not None:
            log.error("run %s: compensation failed: %s", self.run_id, outcome.error)
        await self._finish("canceled", error=decode(self.row["error"]) or {"type": "Canceled"})

    async def _collect_then_compensate(self) -> None:
        with contextlib.suppress(StopReplay, Exception):
            await self._call_workflow()
        self.collect_only = False
        await self._compensate()
