"""How one claim of a run ends: it parks, lets the run go, or holds, retries, fails, cancels
or completes it.

The drive quiesces the execution's lifecycles first (`CommandTasks.quiesce`; a park has
none left running). A park, a retry, a hold or the run's end marks the execution concluded
before it is written: a lifecycle that fails from then on raced it, and it settles what
that lifecycle was writing (the run's end writes the records still in flight with it, or
`write_in_flight` makes them durable before any undo is chosen). A run that fails or is
canceled first undoes its completed steps (`compensations`), newest first. A misused
workflow fails for good; one whose replay does not match its history (a deploy mistake) is
held, not failed (`_hold`). A stop that lets the run go (a lost lease, a drain) writes
nothing but a drain's release: someone else continues the run. A workflow that raised
`ContinueAsNew` ends `continued` and its chain's next run is inserted with that end
(`continue_as_new`; store/continues.py); a next input that does not fit fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ..backends import Row
from ..core.codec import decode
from ..core.errors import (
    InvalidInput,
    NonDeterminismError,
    WorkflowMisuseError,
    describe,
    is_misuse,
    message,
)
from ..store.recorder import StepRecorder
from ..store.records import RunEnd
from ..workflow.commands import Command, cancelled_issuer, never_awaited
from ..workflow.continues import ContinueAsNew
from ..workflow.definition import Definition
from .claimed import Claimed
from .compensations import run_compensation
from .lifecycles import CommandTasks
from .runlog import Stop

log = logging.getLogger("durably.worker")

# A held run is claimed again after HOLD_FIRST_S, doubled at each hold in a row, at most
# HOLD_MAX_S: code that matches its history, once deployed, takes it within that.
HOLD_FIRST_S = 1.0
HOLD_MAX_S = 300.0


def hold_delay(holds: int) -> float:
    """The back-off after the `holds`-th hold in a row (1, 2, 4 ... 300 s)."""
    return min(HOLD_FIRST_S * 2.0 ** min(holds - 1, 30), HOLD_MAX_S)


class Ending:
    """The end of one claim of a run (see the module)."""

    def __init__(
        self,
        x: Claimed,
        tasks: CommandTasks,
        commands: Mapping[int, Command],
        row: Row,
        workflow: Definition[Any, Any],
        recorder: StepRecorder,
        on_park: Callable[[float | None], None],
        collect_only: bool,
        hold_mismatches: bool,
    ) -> None:
        self._x = x  # the claim: its store, lease, log, history and undos
        self._tasks = tasks  # quiesced before an end, concluded as it is written
        self._commands = commands  # every command the workflow issued, by position
        self._row = row  # the run as claimed
        self._workflow = workflow  # its retry policy; the input a continue gives
        self._recorder = recorder  # an end without children is group-committed
        self._on_park = on_park  # when the run is to be claimed again (seconds from now)
        self._collect_only = collect_only  # the claim only undoes: the run ends canceled
        self._hold_mismatches = hold_mismatches  # else a mismatch fails the run

    async def park(self) -> bool:
        """Everything left waits: park the run until the earliest wake-up. False: nothing waits."""
        parked = [c for c in self._commands.values()
                  if c.wait is not None and not c.settled and not c.abandoned]  # fmt: skip
        waits = [c.wait for c in parked if c.wait is not None]
        if not waits:
            return False
        # The children whose end wakes the run: those its code awaits. One it only started
        # (a handle not awaited yet) is read again by the claim that reaches its await.
        children = [c.wait.ended_by for c in parked if c.blocking and c.wait and c.wait.ended_by]
        self._tasks.concluded = True
        wakes = [w.wake_at for w in waits if w.wake_at is not None]
        wake_at = min(wakes) if wakes else None
        status = "pending" if all(w.retry for w in waits) else "waiting"
        label = ", ".join(dict.fromkeys(w.label for w in waits))[:500]
        x = self._x
        available = await x.store.park(x.lease, status, wake_at, label, children)
        if available is not None:
            self._on_park((available - x.now()).total_seconds())
        return True

    async def conclude(
        self,
        main: asyncio.Task[Any] | None,
        stop: Stop | None,
        mismatch: BaseException | None,
        fatal: BaseException | None,
    ) -> None:
        """End the run as the drive left it, its lifecycles quiesced: `main` (None: it
        parked), why it stopped, the replay check's `mismatch`, and what poisoned it (None
        too when the workflow's own error is the run's)."""
        x = self._x
        if stop is not None and stop.status is None:  # let go: someone else continues
            log.warning("run %s: %s; it is left to be claimed again", x.run_id, stop)
            if stop.release:
                with contextlib.suppress(Exception):
                    await x.store.release(x.lease)
            return
        if mismatch is not None and self._hold_mismatches:
            await self._hold(mismatch, stop)
            return
        if main is None and stop is None:  # parked
            return
        if self._collect_only or (stop is not None and stop.status == "canceled"):
            await self._compensate()
            await self._finish("canceled")  # keeps the error the cancel stored
            return
        if stop is not None:
            await self._fail(stop.error, retry=False)
            return
        if fatal is not None:
            await self._fail(fatal, retry=False)
            return
        assert main is not None
        await self._ended(main)

    async def _ended(self, main: asyncio.Task[Any]) -> None:
        if main.cancelled():
            await self._fail(WorkflowMisuseError("the workflow's task was cancelled"), retry=False)
            return
        error = main.exception()
        if error is not None and not isinstance(error, ContinueAsNew):
            # A misuse, or a value refused (signal data that does not fit its type), is
            # refused again by every attempt, which replays it: the run fails for good.
            await self._fail(error, retry=not is_misuse(error))
            return
        forgotten = [c for c in self._commands.values()
                     if not c.awaited and not cancelled_issuer(c)]  # fmt: skip
        if forgotten:  # returned (not dropped) or kept to the end, never awaited
            await self._fail(never_awaited(forgotten[0]), retry=False)
            return
        if isinstance(error, ContinueAsNew):
            await self.continue_as_new(error)
            return
        try:
            out = self._x.encode(main.result(), "the workflow's result", history=False)
        except InvalidInput as exc:
            await self._fail(exc, retry=False)
            return
        await self._finish("completed", output_json=out)

    async def continue_as_new(self, request: ContinueAsNew) -> None:
        """End the run `continued` and start its chain's next run with the input asked for,
        in one transaction. That input is validated as a start's: one that does not fit
        fails the run for good (every attempt would ask for it again)."""
        x = self._x
        wf = self._workflow
        try:
            if not wf.takes_input and request.input is not None:
                raise InvalidInput(f"workflow {wf.name!r} takes no input")
            value = wf.parse_input(request.input) if wf.takes_input else None
            input_json = x.encode(value, "the next run's input", history=False)
        except Exception as exc:  # InvalidInput, or a validator's own error
            await self._fail(exc, retry=False)
            return
        self._tasks.concluded = True
        next_id = uuid.uuid4().hex
        key = self._row.get("idempotency_key")
        if await x.store.continues.continue_run(x.lease, next_id, input_json, key,
                                                x.log.in_flight()):  # fmt: skip
            log.info("run %s continued as %s", x.run_id, next_id)
            return
        log.warning("run %s was canceled as it continued as new", x.run_id)
        await self._compensate()
        await x.store.ends.finish_run(x.lease, "canceled", None, None, children=True)

    async def _fail(self, error: BaseException, retry: bool) -> None:
        x = self._x
        await self._tasks.quiesce()
        described = describe(error)  # once: its message is the user's code
        attempts = self._row["attempts"]
        if retry and attempts < self._row["max_attempts"]:
            # Its waits end with it, in the retry's transaction (see `RunEnds.retry_run`).
            delay = self._workflow.retry.delay(attempts).total_seconds()
            log.warning("run %s: attempt %d failed (%s: %s); retrying in %gs", x.run_id,
                        attempts, described["type"], described["message"], delay)  # fmt: skip
            self._tasks.concluded = True
            resumes = decode(self._row.get("resumes")) or ()
            await x.store.ends.retry_run(x.lease, described, delay, resumes)
            self._on_park(delay)
            return
        log.warning("run %s failed: %s: %s", x.run_id, described["type"], described["message"])
        await self._compensate()
        await self._finish("failed", error=described)

    async def _hold(self, error: BaseException, stop: Stop | None) -> None:
        """The code does not match the run's history (a deploy mistake, SPEC §4.2): the
        run is held, not failed. Nothing is undone (the code cannot say which undo belongs
        to which step), no attempt is spent; its waits and children stay as they are, and a
        claim of code that matches goes on from its history, a cancel or a deadline passed
        included. A canceled run with nothing left to undo simply ends."""
        x = self._x
        canceled = self._collect_only or (stop is not None and stop.status == "canceled")
        if canceled and not x.history.undos_left():
            await self._finish("canceled")
            return
        await x.log.write_in_flight()
        holds = (self._row.get("holds") or 0) + 1
        delay = hold_delay(holds)
        described = describe(error) | {
            "message": f"{message(error)} The run is held, not failed: it is claimed again "
                       f"in {delay:g}s (hold {holds} in a row) and goes on once the deployed "
                       "code matches its history; `durably cancel` ends it.",
            "holds": holds, "retry_in_s": delay,
        }  # fmt: skip
        if isinstance(error, NonDeterminismError):
            described |= {"position": error.position, "expected": error.expected,
                          "found": error.found}  # fmt: skip
        log.warning("run %s held (hold %d in a row, claimed again in %gs): %s", x.run_id,
                    holds, delay, message(error))  # fmt: skip
        self._tasks.concluded = True
        available = await x.store.hold(x.lease, described, delay)
        self._on_park((available - x.now()).total_seconds())

    async def _compensate(self) -> None:
        """Run each completed step's undo once, newest first (durably: recorded steps).
        Every step record still in flight is made durable first: a step that completed is
        undone, even when its record's own write is late or failed. A `compensate()` still
        undoing is waited for (see `CommandTasks._undoing`): its steps are taken."""
        x = self._x
        await self._tasks.quiesce(fold=True)
        await x.log.write_in_flight()
        for cmd in x.undos.take():
            await run_compensation(x, cmd)

    async def _finish(
        self, status: str, output_json: str | None = None, error: dict[str, Any] | None = None
    ) -> None:
        x = self._x
        self._tasks.concluded = True
        children = any(cmd.kind == "child" for cmd in self._commands.values())
        records = x.log.in_flight()
        if children:  # its children end with it, in one transaction of its own
            ended = await x.store.ends.finish_run(
                x.lease, status, output_json, error, children, records
            )
        else:
            end = RunEnd(x.lease, status, output_json, error, records, x.codec)
            ended = await self._recorder.finish(end) or await x.store.ends.end_refused(x.lease)
        if ended:
            return
        # Canceled while it ended: the cancel wins; undo what completed.
        log.warning("run %s was canceled as it ended %s", x.run_id, status)
        await self._compensate()
        await x.store.ends.finish_run(x.lease, "canceled", None, None, children)
