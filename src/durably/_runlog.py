"""The run's log as one execution writes it: what the workflow receives, in which order,
and when it is durable.

Every outcome the workflow receives takes the next `seq` of the run's log. A function
step's result is handed to the workflow as soon as its record is sent (the record is never
held: group commit writes it within milliseconds). Until it is durable nothing the workflow
does next can be seen outside: a command issued after it starts only once every result it
could depend on is durable (`Command.gate`), the run parks only when every record is
durable, and it ends in one statement with the records still in flight. A record that
cannot be written stops the execution. Outcomes reach the workflow strictly in `seq` order:
one whose transaction is still open holds back every later one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._codec import validate
from ._commands import Command
from ._errors import BaseFailure
from ._loop import WorkflowLoop
from ._recorder import StepRecorder
from ._records import Lease, PendingStep
from ._store import Store


@dataclass(frozen=True)
class Stop:
    """Why an execution stops before its workflow ends.

    `status` "canceled" or "failed": this worker ends the run so (with `error`); None: it
    lets the run go for another claim (`release`: at once, as a draining worker does).
    """

    why: str
    status: str | None = None
    error: Any = None
    release: bool = False

    def replaces(self, current: Stop | None) -> bool:
        """Whether this stop is to take the place of `current`: the first one does, and
        so does a cancel or a lost lease a draining release is waiting under (a body kept
        running for the release waits no longer: the run is not ours to keep)."""
        return current is None or (current.release and not self.release)

    def __str__(self) -> str:
        return self.why


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None


class RunLog:
    """Part of `Execution`: the log's bookkeeping and delivery to the workflow."""

    loop: WorkflowLoop
    lease: Lease
    store: Store
    recorder: StepRecorder
    commands: dict[int, Command]
    compensations: list[tuple[int, Command]]
    fatal: BaseException | None
    stop: Any
    halt: Callable[[Any], None]
    give_back: Callable[[Command, int], None]

    def _init_log(self, max_seq: int) -> None:
        self._seq = max_seq
        self._unpublished: set[int] = set()  # reserved, outcome unknown: holds later ones
        self._in_flight: dict[int, PendingStep] = {}  # delivered, record not durable yet
        self._delivered = max_seq
        self._durable_waiter: asyncio.Future[None] | None = None
        self._outbox: dict[int, tuple[Command, Outcome]] = {}
        self._changed = asyncio.Event()
        self._markers: set[int] = set()  # positions of patch markers not durable yet

    def reserve(self) -> int:
        """The next position in the run's log, for an outcome about to be known."""
        self._seq += 1
        self._unpublished.add(self._seq)
        return self._seq

    def unreserve(self, seq: int) -> None:
        self._unpublished.discard(seq)
        self._changed.set()

    def publish(
        self, seq: int, cmd: Command, value: Any = None, error: BaseException | None = None,
        record: PendingStep | None = None,
    ) -> None:  # fmt: skip
        """Outcome `seq` is known (and durable unless its `record` is still in flight):
        deliver it once every earlier one is known."""
        self._unpublished.discard(seq)
        if error is None:
            cmd.value = value
        if record is not None:
            self._in_flight[seq] = record
        elif error is None and cmd.compensate is not None:
            self.compensations.append((seq, cmd))
        self._outbox[seq] = (cmd, Outcome(value, error))
        self._changed.set()

    def _durable(self, seq: int, cmd: Command) -> None:
        record = self._in_flight.pop(seq, None)  # None: noted already (`write_in_flight`)
        if record is not None and record.status == "completed" and cmd.compensate is not None:
            self.compensations.append((seq, cmd))
        self.wake_gated()

    def wake_gated(self) -> None:
        """Commands waiting for records to be durable look again (one was, or the
        execution stops: then nothing more starts)."""
        waiter, self._durable_waiter = self._durable_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def marker_pending(self, position: int) -> None:
        """A patch marker at `position` is to be recorded: nothing issued after it (at a
        later position) starts before it is durable (see `_patching`)."""
        self._markers.add(position)

    def marker_durable(self, position: int) -> None:
        self._markers.discard(position)
        self.wake_gated()

    async def _durable_through(self, seq: int, position: int | None = None) -> None:
        """Wait until every result up to `seq` is durable (and, for a command at
        `position`, every patch marker before it), or the execution stops."""
        while (
            self.stop is None
            and self.fatal is None
            and (
                (self._in_flight and min(self._in_flight) <= seq)
                or (position is not None and self._markers and min(self._markers) < position)
            )
        ):
            if self._durable_waiter is None:
                self._durable_waiter = asyncio.get_running_loop().create_future()
            await self._durable_waiter

    async def write_in_flight(self) -> None:
        """Make every record still in flight durable now, and note it so.

        The run's compensations are computed next and must include every step that
        completed: a record in flight may be late, or its own write may have failed after
        the run's end was sent (its lifecycle then took the end to have written it), and a
        refused end wrote none of them. Writing one again is harmless: a completed record is
        never overwritten, so one that does not come back was written already, if the lease
        is still ours (else LeaseLostError: the run is left to its next owner).
        """
        pending = sorted(self._in_flight.items())
        if not pending:
            return
        lease = self.lease
        written = await self.store.record_many(
            lease.worker_id, [(lease, step) for _, step in pending]
        )
        if len(written) < len(pending):
            async with self.store.db.transaction() as tx:
                await self.store.check_lease(tx, lease)
        for seq, step in pending:
            self._durable(seq, self.commands[step.position])

    async def record(self, step: PendingStep) -> None:
        await self.recorder.record(self.lease, step)

    async def settle(
        self, cmd: Command, step: PendingStep, value: Any = None, error: BaseException | None = None
    ) -> None:
        """Record a step's outcome as the next entry of the log and deliver it."""
        step.seq = self.reserve()
        self.publish(step.seq, cmd, value, error, record=step)
        cmd.recording = True
        self._changed.set()
        status = await self.recorder.record(self.lease, step)
        cmd.recording = False
        self._durable(step.seq, cmd)
        if status == "canceled":  # its NOTIFY did not reach us
            self.halt(Stop("canceled", "canceled"))

    async def settle_durable(self, cmd: Command, step: PendingStep, value: Any) -> None:
        """Record an outcome as the next entry of the log, and deliver it once durable
        (later outcomes wait for it: its seq is reserved until then)."""
        step.seq = self.reserve()
        cmd.recording = True
        try:
            status = await self.recorder.record(self.lease, step)
        except BaseException:
            self.unreserve(step.seq)
            raise
        finally:
            cmd.recording = False
        self.publish(step.seq, cmd, value)
        if status == "canceled":  # its NOTIFY did not reach us
            self.halt(Stop("canceled", "canceled"))

    async def record_canceled(self, cmd: Command, attempt: int, elapsed: float) -> None:
        if self.stop is not None and self.stop.status is not None:
            with contextlib.suppress(Exception):
                await self.record(PendingStep(
                    cmd.position, attempt, cmd.name, cmd.kind, "canceled", elapsed_s=elapsed
                ))  # fmt: skip

    def _deliver(self) -> None:
        while self._outbox and self.fatal is None and self.stop is None:
            seq = min(self._outbox)
            if self._unpublished and min(self._unpublished) < seq:
                return
            cmd, outcome = self._outbox.pop(seq)
            self._delivered = seq
            if not self._resolve(cmd, outcome) and cmd.kind == "signal-wait":
                self.give_back(cmd, seq)

    def _resolve(self, cmd: Command, outcome: Outcome) -> bool:
        """Hand one result to the workflow and run it until it blocks again; False if the
        workflow stopped awaiting it (a `wait_first` loser) and will never receive it."""
        cmd.settled = True
        received = not cmd.future.done()
        if received:
            if outcome.error is not None:
                cmd.future.set_exception(outcome.error)
            else:
                try:
                    value = _typed(cmd, outcome.value)
                except Exception as exc:  # InvalidInput, or a validator's own error
                    cmd.future.set_exception(exc)
                except BaseException as exc:  # a validator is user code (SPEC §4.20)
                    cmd.future.set_exception(BaseFailure(exc))
                else:
                    cmd.future.set_result(value)
        self.loop.run_until_blocked()
        return received


def _typed(cmd: Command, value: Any) -> Any:
    if cmd.result_type is Any:
        return value
    return validate(cmd.result_type, value, "a step result")
