"""Executing one claimed run: replay the log, run new steps, park or end.

Workflow code runs on a `WorkflowLoop` of its own (see `loop`). The execution first
replays: it hands the recorded results back one at a time, in log order, running the
workflow until it blocks after each, so every branch sees what it saw the first time. Then
it goes live: commands the workflow issued and history has not resolved get their
lifecycles (`kinds`) as tasks on the worker's loop (`lifecycles`); each result takes the
next `seq` of the run's log and reaches the workflow in that order (`runlog`). Waits fire
on time while other bodies work (`livewaits`); when everything left waits (a sleep, a
signal, a child, a retry back-off) the run parks, and the next claim replays from the
start. How the claim ends (parked, let go, held, retried, failed, canceled, completed) is
`ending`'s; its limits, `budget`'s; which completed steps are undone, `undos`'s.

The engine's own failures never reach workflow code: a lost lease, a failed engine write,
a shutdown or a cancel stop the execution (nothing more of the workflow runs), and a
non-deterministic or misused workflow is poisoned (it is never driven again). A misused one
fails; one whose replay does not match its history (a deploy mistake) is held.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..backends import Row
from ..core import telemetry as _telemetry
from ..core.clock import Clock
from ..core.codec import DEFAULT_MAX_HISTORY, decode
from ..core.errors import (
    BaseFailure,
    ConfigurationError,
    DatabaseUnavailable,
    DeadlineExceeded,
    LeaseLostError,
    NonDeterminismError,
    WorkflowMisuseError,
    describe,
)
from ..core.sealing import as_stored
from ..store.confirm import ClaimConfirmation
from ..store.history import History
from ..store.recorder import StepRecorder
from ..store.records import Lease, PendingStep
from ..store.sealed import SEALED
from ..store.store import Store
from ..workflow.commands import (
    Command,
    cancelled_issuer,
    error_for,
    never_awaited,
    recorded_value,
    typed,
)
from ..workflow.context import WorkflowContext
from ..workflow.steps import StepApi
from ..workflow.syncflow import SyncDriver
from ..workflow.syncsteps import SyncStepApi, SyncWorkflowContext
from .budget import Budget
from .ending import Ending
from .kinds import run_lifecycle
from .lifecycles import CommandTasks
from .livewaits import LiveWaits
from .loop import WorkflowLoop
from .runlog import Outcome, RunLog, Stop
from .undos import Undos

if TYPE_CHECKING:
    from ..workflow.definition import Definition

log = logging.getLogger("durably.worker")


class Execution:
    """One claim of one run, from replay to park or finish."""

    def __init__(
        self,
        store: Store,
        workflow: Definition[Any, Any],
        row: Row,
        worker_id: str,
        clock: Clock,
        threads: Executor | None,
        max_payload: int,
        max_step_attempts: int,
        recorder: StepRecorder,
        on_park: Callable[[float | None], None],
        heartbeat: Callable[[], Coroutine[Any, Any, None]],
        confirm: ClaimConfirmation | None = None,
        max_history_bytes: int = DEFAULT_MAX_HISTORY,
        hold_mismatches: bool = True,
    ) -> None:
        # The claim, as the lifecycles of its commands see it (`Claimed`).
        self.store = store
        self._confirm = confirm
        self.workflow = workflow
        self.row = row
        self.lease = Lease(row["id"], row["fence"], worker_id, row["attempts"])
        self.history = History.parse(row["history"], row["attempts"], row.get("resumes"))
        self.clock = clock
        self.threads = threads
        self.max_payload = max_payload
        self.codec = store.codec  # payloads at rest are sealed with it (SPEC §4.24)
        self.heartbeat = heartbeat
        self._db_now: datetime = row["db_now"]
        self.lease_s = (row["lease_expires_at"] - self._db_now).total_seconds()  # as claimed
        self._mono_at_claim = clock.monotonic()
        # The workflow's side: its loop, what it issued, what it received.
        self.loop = WorkflowLoop(self.poison)  # I/O is refused
        self.commands: dict[int, Command] = {}
        self._position = 0
        self.replaying = True
        self._replayed_seq = 0  # the log entry replay handed back last
        self.collect_only = bool(row["compensating"])  # the claim only undoes
        self.steps = StepApi(self)
        self._sync: SyncDriver | None = None
        # Why it stops, if it does (`Driven`).
        self.stop: Stop | None = None
        self.fatal: BaseException | None = None
        # The replay check's (not the user's), or the stored input no longer fitting the
        # code's model under a run that has history: a deploy mistake, held (see `ending`).
        self.mismatch: BaseException | None = None
        self._drop_error: BaseException | None = None  # the fatal a dropped step made
        # Its collaborators, each with its own state.
        self._changed = asyncio.Event()  # the drive looks again
        self.log = RunLog(self.history.max_seq, self.lease, store, recorder, self, self._changed)
        self.budget = Budget(
            self.run_id, self.history, len(as_stored(row["history"] or "")), max_payload,
            max_step_attempts, max_history_bytes, self.poison, self.codec,
        )  # fmt: skip
        self.undos = Undos(self.history)
        self.tasks = CommandTasks(
            self, self.run_id, self.commands, self.log, self._changed,
            functools.partial(run_lifecycle, self), self._arm,
        )  # fmt: skip
        self.waits = LiveWaits(
            self, self.tasks, self.commands, store.givebacks, self.lease, self.log, self.now,
            self._changed, self.collect_only,
        )  # fmt: skip
        self.ending = Ending(
            self, self.tasks, self.commands, row, workflow, recorder, on_park,
            self.collect_only, hold_mismatches,
        )  # fmt: skip

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    @property
    def interrupting(self) -> bool:
        return self.tasks.interrupting

    @property
    def concluded(self) -> bool:
        """It parked, or its end is being written (nothing more is started or taken up)."""
        return self.tasks.concluded

    async def confirm_claim(self) -> None:
        """Return once this run's claim is durable (before its fence reaches a body; see
        `_confirm`); LeaseLostError if it is not held."""
        if self._confirm is not None:
            await self._confirm.confirm(self.run_id)

    def now(self) -> datetime:
        """The database's time, estimated from the claim's `now()` and the elapsed time."""
        return self._db_now + timedelta(seconds=self.clock.monotonic() - self._mono_at_claim)

    def encode(self, value: Any, what: str, history: bool = True) -> str:
        return self.budget.encode(value, what, history)

    def new_attempt(self, position: int, spend: bool = True) -> int:
        return self.budget.new_attempt(position, spend)

    # --------------------------------------------------------------- issuing (workflow loop)

    def next_position(self) -> int:
        """The position the workflow's next step will take."""
        return self._position + 1

    def received(self) -> int:
        """The log entry the workflow received last (the same at a call, replayed or not)."""
        return self._replayed_seq if self.replaying else self.log.delivered

    def issue(self, cmd_factory: Callable[[int], Command], name: str, kind: str) -> Command:
        """Give the workflow's next step its position and check it against history."""
        running = asyncio._get_running_loop()
        if running is not self.loop or self.fatal is not None:
            error = self.fatal or WorkflowMisuseError(
                f"ctx.step.{kind.replace('-', '_')}({name!r}) was called outside the "
                "workflow's code (from inside a step body?); step bodies cannot run steps"
            )
            home = self.tasks.home
            if running is None and home is not None:  # a sync body's thread
                home.call_soon_threadsafe(self.poison, error)
            else:
                self.poison(error)
            raise error
        self._position += 1
        try:
            rec = self.history.at(self._position, name, kind)
        except NonDeterminismError as exc:
            self.mismatched(exc)
            raise
        cmd = cmd_factory(self._position)
        cmd.recorded = rec
        cmd.gate = self.log.delivered
        cmd.dropped = self._dropped
        cmd.issuer = asyncio.current_task(self.loop)
        cmd.future.add_done_callback(lambda future: self.waits.awaited_no_more(cmd, future))
        self.commands[cmd.position] = cmd
        if rec is None or not rec.resolves:
            self.tasks.queue(cmd)
        return cmd

    def _dropped(self, cmd: Command) -> None:
        """Workflow code let go of `cmd`'s awaitable without awaiting it: the execution is
        poisoned at once, so its next step call raises and nothing it issued starts (the
        same place live and on replay: the code decides it). Let go of later, outside the
        workflow's pass (the run parked, or ended), it is not a mistake of the code's."""
        if not self.loop.is_running() or self.tasks.concluded:
            return
        if cancelled_issuer(cmd):
            return
        self._drop_error = never_awaited(cmd)
        self.poison(self._drop_error)

    def poison(self, error: BaseException) -> None:
        """The workflow did what cannot be replayed: never drive it again; the run fails."""
        if self.fatal is None:
            self.fatal = error
        self.log.wake_gated()
        self._changed.set()

    def mismatched(self, error: BaseException) -> None:
        """The replay check found the code does not match the history: poisoned, and
        the run is held rather than failed (unless something else poisoned it first)."""
        if self.fatal is None:
            self.mismatch = error
        self.poison(error)

    # --------------------------------------------------------------- the log's reader

    @property
    def stopped(self) -> bool:
        return self.fatal is not None or self.stop is not None

    def halt(self, stop: Stop) -> None:
        """Stop driving the workflow and interrupt every step body in flight."""
        if stop.replaces(self.stop):
            self.stop = stop
        self.tasks.interrupt_bodies()
        self.log.wake_gated()
        self._changed.set()

    def receive(self, cmd: Command, outcome: Outcome) -> bool:
        """Hand one result to the workflow and run it until it blocks again; False if the
        workflow stopped awaiting it (a `wait_first` loser) and will never receive it."""
        cmd.settled = True
        received = not cmd.future.done()
        if received:
            if outcome.error is not None:
                cmd.future.set_exception(outcome.error)
            else:
                try:
                    value = typed(cmd, outcome.value)
                except Exception as exc:  # InvalidInput, or a validator's own error
                    cmd.future.set_exception(exc)
                except BaseException as exc:  # a validator is user code (SPEC §4.20)
                    cmd.future.set_exception(BaseFailure(exc))
                else:
                    cmd.future.set_result(value)
        self.loop.run_until_blocked()
        return received

    def compensable(self, seq: int, cmd: Command) -> None:
        self.undos.add(seq, cmd)

    def _arm(self, cmd: Command) -> None:
        self.waits.arm(cmd)  # (made after the tasks, which call this)

    def give_back(self, cmd: Command, seq: int) -> None:
        self.waits.give_back(cmd, seq)

    def poke(self) -> None:
        """Something may have arrived for this run (a signal, a child's end): look again."""
        self.waits.poke()

    def marker_pending(self, position: int) -> None:
        self.log.marker_pending(position)

    def value_pending(self, cmd: Command, output_json: str) -> None:
        self.budget.recorded(output_json)
        attempt = self.new_attempt(cmd.position, spend=False)  # a value is no attempt
        self.log.value_pending(cmd, PendingStep(
            cmd.position, attempt, cmd.name, cmd.kind, "completed", output_json=output_json
        ))  # fmt: skip

    async def record_canceled(self, cmd: Command, attempt: int, elapsed: float) -> None:
        if self.stop is not None and self.stop.status is not None:
            with contextlib.suppress(Exception):
                await self.log.record(PendingStep(
                    cmd.position, attempt, cmd.name, cmd.kind, "canceled", elapsed_s=elapsed
                ))  # fmt: skip

    # --------------------------------------------------------------- the run

    async def execute(self) -> None:
        """Run the claim to its end: park, retry, finish, or let go."""
        self.tasks.home = asyncio.get_running_loop()
        try:
            with _telemetry.run_span(self.row):
                await self._execute()
        except (LeaseLostError, DatabaseUnavailable) as exc:
            log.warning("run %s: %s; it is left to be claimed again", self.run_id, exc)
        except BaseException as exc:  # a defect: end the run, no loop (never the worker)
            task = asyncio.current_task()
            if isinstance(exc, GeneratorExit):  # this coroutine closed: it cannot await
                raise
            if isinstance(exc, asyncio.CancelledError) and task and task.cancelling():
                # Cancelled from outside (the event loop shutting down), not by a defect:
                # the run is left to its lease, then claimed again.
                log.warning("run %s: its execution was cancelled; it is left to be claimed "
                            "again", self.run_id)  # fmt: skip
                raise
            log.error("run %s: unexpected error; the run fails", self.run_id, exc_info=exc)
            with contextlib.suppress(Exception):
                await self.store.ends.finish_run(self.lease, "failed", None, describe(exc))
        finally:
            self.tasks.concluded = True
            if self._confirm is not None:  # a confirmation asked again renews it no more
                self._confirm.forget(self.run_id)
            self.tasks.interrupt_bodies()
            self.waits.cancel_timers()
            try:
                await self.tasks.end()
            finally:  # even if cancelled again: no workflow thread is left waiting
                self.loop.close()
                if self._sync is not None:  # a sync workflow's thread on a step unwinds
                    self._sync.close()

    async def _execute(self) -> None:
        deadline = self.row["deadline_at"]
        if not self.collect_only and deadline is not None and deadline <= self.now():
            self.halt(Stop("deadline", "failed", DeadlineExceeded(
                f"run passed its deadline {deadline.isoformat()}")))  # fmt: skip
        timer = None
        if deadline is not None and self.stop is None:
            delay = max((deadline - self.now()).total_seconds(), 0)
            timer = asyncio.get_running_loop().call_later(delay, self.halt, Stop(
                "deadline", "failed", DeadlineExceeded(
                    f"run passed its deadline {deadline.isoformat()}")))  # fmt: skip
        try:
            main = await self._drive()
        finally:
            if timer is not None:
                timer.cancel()
        await self._conclude(main)

    async def _drive(self) -> asyncio.Task[Any] | None:
        """Replay, then run until the workflow ends, everything waits, or it must stop.

        None: the run parked.
        """
        main = self.loop.create_task(self._call_workflow())
        self.loop.run_until_blocked()
        self._replay()
        self.replaying = False
        while not (self.collect_only or self.fatal or self.stop or main.done()):
            self._start_issued()
            if self.tasks.idle() and not self.log.undelivered():
                if await self.ending.park():
                    return None
                self.poison(WorkflowMisuseError(
                    "the workflow is blocked on something that is not a durable step "
                    "(an asyncio primitive nobody will set?); it can never continue"
                ))  # fmt: skip
                break
            self._changed.clear()
            await self._changed.wait()
            self.log.deliver()
        self._start_issued()  # what the workflow issued as it returned (a child to start)
        return main

    def _start_issued(self) -> None:
        if self.replaying or self.collect_only or self.fatal or self.stop:
            return
        # Values the pass read join the records it followed, still waiting for their
        # statement: now, before the recorder's turn sends them (`RunLog.send_values`).
        self.log.send_values()
        self.tasks.start_queued()

    def _replay(self) -> None:
        """Hand back the recorded results in log order, one at a time."""
        for rec in self.history.log:
            if self.fatal is not None:
                return
            if self.history.skips(rec, self._position):  # a resume's fresh budget
                self.history.forget(rec.position)
                cmd = self.commands.get(rec.position)
                if cmd is not None:
                    cmd.recorded = None
                    self.tasks.queue(cmd)
                continue
            cmd = self.commands.get(rec.position)
            if cmd is None:
                self.mismatched(NonDeterminismError(
                    rec.position, rec.describe(), "no step there (the code did not reach it)"
                ))  # fmt: skip
                return
            value = recorded_value(rec)
            self._replayed_seq = rec.seq or 0
            if rec.kind == "compensate":
                self.undos.took(cmd, rec)
            if rec.completed:
                if cmd.compensate is not None:
                    cmd.value = value
                    self.undos.add(rec.seq or 0, cmd)
                received = self.receive(cmd, Outcome(value=value))
                if not received and rec.kind == "signal-wait" and rec.delivered:
                    self.give_back(cmd, rec.seq or 0)  # the claim that recorded it did not
            else:
                self.receive(cmd, Outcome(error=error_for(rec)))

    async def _conclude(self, main: asyncio.Task[Any] | None) -> None:
        stop = self.stop
        ends_well = (stop is None and self.fatal is None and main is not None and main.done()
                     and not main.cancelled() and main.exception() is None)  # fmt: skip
        await self.tasks.quiesce(fold=ends_well)
        fatal = None if self._own_error(main) else self.fatal
        await self.ending.conclude(main, stop, self.mismatch, fatal)

    def _own_error(self, main: asyncio.Task[Any] | None) -> bool:
        """The workflow failed with an error of its own, which dropped a step as it
        propagated (a gather whose building raised): that error is the run's, not the
        forgotten await the drop reported."""
        if self.fatal is None or self.fatal is not self._drop_error:
            return False
        if main is None or not main.done() or main.cancelled():
            return False
        error = main.exception()
        return error is not None and error is not self.fatal

    async def _call_workflow(self) -> Any:
        wf = self.workflow
        if self.row.get(SEALED):  # a key this worker lacks: held until it has it
            error = ConfigurationError(
                f"run {self.run_id} holds values encrypted with a key this worker lacks "
                f"(in {', '.join(self.row[SEALED])}): give it the app's keys "
                "(DURABLY_CODEC_KEYS, or Durably(codec=...))"
            )
            self.mismatched(error)
            raise error
        try:
            value = wf.parse_input(decode(self.row["input"])) if wf.takes_input else None
        except Exception as exc:  # InvalidInput, or a validator's own error
            # The stored input does not fit the code's model. Under a run that has history
            # (code that took this input ran it) that is a deploy mistake, as a replay
            # mismatch is: held until code that fits is deployed. A run that never ran (a
            # thin client's input, written unvalidated by `app.start` by name) fails, for
            # good (every attempt would fail alike). Either way the code never started, so
            # replay must not report the steps it did not reach as a non-determinism.
            if self.history.reaches(0):
                self.mismatched(exc)
            else:
                self.poison(exc)
            raise
        if wf.sync:
            return await self._call_sync_workflow(value)
        ctx = WorkflowContext(
            run_id=self.run_id, workflow=wf.name, version=wf.version,
            attempt=self.row["attempts"], step=self.steps, input=value,
            created_at=self.row["created_at"], started_at=self.row["started_at"],
        )  # fmt: skip
        if not wf.takes_input:
            return await wf.fn(ctx)
        return await wf.fn(ctx, value)

    async def _call_sync_workflow(self, value: Any) -> Any:
        """A plain `def` workflow: in a thread of its own, in lockstep (`_syncflow`)."""
        wf = self.workflow
        home = self.tasks.home_loop()
        driver = SyncDriver(
            wf.fn, (), f"durably-workflow-{self.run_id}",
            lambda error: home.call_soon_threadsafe(self.poison, error),
        )  # fmt: skip
        ctx = SyncWorkflowContext(
            self.run_id, wf.name, wf.version, self.row["attempts"],
            SyncStepApi(self.steps, driver), value, self.row["created_at"],
            self.row["started_at"],
        )  # fmt: skip
        driver.args = (ctx, value) if wf.takes_input else (ctx,)
        self._sync = driver
        return await driver.main()
