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
from dataclasses import dataclass
from typing import Any, Protocol

from ..store.recorder import StepRecorder
from ..store.records import Lease, PendingStep
from ..store.store import Store
from ..workflow.commands import Command


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


class Reader(Protocol):
    """The execution as its log sees it: the workflow that receives the outcomes."""

    commands: dict[int, Command]

    @property
    def stopped(self) -> bool:
        """The workflow is driven no further (it must stop, or cannot go on)."""
        ...

    def halt(self, stop: Stop) -> None: ...

    def receive(self, cmd: Command, outcome: Outcome) -> bool:
        """Hand `outcome` to the workflow; False if it stopped awaiting `cmd`."""
        ...

    def give_back(self, cmd: Command, seq: int) -> None:
        """Signal wait `cmd` ended (log entry `seq`) after the workflow stopped awaiting
        it: its signal goes back to the run."""
        ...

    def compensable(self, seq: int, cmd: Command) -> None:
        """`cmd` completed durably at `seq` and has an undo."""
        ...


class RunLog:
    """The log of one execution: each outcome's `seq`, which are durable, and delivery
    in `seq` order to its `Reader`. `changed` is set whenever the drive should look again."""

    def __init__(
        self, max_seq: int, lease: Lease, store: Store, recorder: StepRecorder,
        reader: Reader, changed: asyncio.Event,
    ) -> None:  # fmt: skip
        self._lease = lease
        self._store = store
        self._recorder = recorder
        self._reader = reader
        self.changed = changed
        self._seq = max_seq
        self._unpublished: set[int] = set()  # reserved, outcome unknown: holds later ones
        self._in_flight: dict[int, PendingStep] = {}  # delivered, record not durable yet
        self.delivered = max_seq  # the last seq the workflow received
        self._durable_waiter: asyncio.Future[None] | None = None
        self._outbox: dict[int, tuple[Command, Outcome]] = {}
        self._markers: set[int] = set()  # positions of patch markers not durable yet
        self._values: dict[int, tuple[Command, PendingStep]] = {}  # read, not sent yet
        self._sent_values: dict[int, tuple[PendingStep, asyncio.Future[str]]] = {}  # not durable

    def undelivered(self) -> bool:
        """Outcomes are yet to reach the workflow (known, or still to be known)."""
        return bool(self._outbox or self._unpublished)

    def in_flight(self) -> list[PendingStep]:
        """Records delivered to the workflow and not durable yet (the run's end writes
        them with it)."""
        return list(self._in_flight.values())

    def reserve(self) -> int:
        """The next position in the run's log, for an outcome about to be known."""
        self._seq += 1
        self._unpublished.add(self._seq)
        return self._seq

    def unreserve(self, seq: int) -> None:
        self._unpublished.discard(seq)
        self.changed.set()

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
            self._reader.compensable(seq, cmd)
        self._outbox[seq] = (cmd, Outcome(value, error))
        self.changed.set()

    def _durable(self, seq: int, cmd: Command) -> None:
        record = self._in_flight.pop(seq, None)  # None: noted already (`write_in_flight`)
        if record is not None and record.status == "completed" and cmd.compensate is not None:
            self._reader.compensable(seq, cmd)
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

    def value_pending(self, cmd: Command, step: PendingStep) -> None:
        """The workflow read a new value (`ctx.now()`, ...) at `cmd`'s position: it is
        to be recorded, and holds back what is issued after it, as a patch marker does."""
        self._values[cmd.position] = (cmd, step)
        self.marker_pending(cmd.position)

    def send_values(self) -> None:
        """Send the values read so far as the next entries of the log, in position order,
        each as soon as it can go: when every record it may depend on (those up to its
        gate, and the values read before it) is durable or still waits in the recorder for
        its statement, which the value then joins. Values read in a pass that followed a
        result thus ride in that result's statement: they cost no round trip of their own.
        A value durable without one it depends on would replay beside a fresh one the code
        may branch on differently; one that cannot go yet (a patch marker before it is not
        durable, a record it depends on is being written) goes once they are, from its
        lifecycle (`value_durable`), and those after it wait for it."""
        for position in sorted(self._values):
            cmd, step = self._values[position]
            if any(m < position for m in self._markers if m not in self._sent_values):
                return  # a patch marker, or a value not sent yet, must be durable first
            behind = [s for seq, s in self._in_flight.items()
                      if seq <= cmd.gate or s.position in self._sent_values]  # fmt: skip
            if behind and not self._recorder.waiting(behind):
                return
            del self._values[position]
            step.seq = self.reserve()
            self.publish(step.seq, cmd, cmd.future.result(), record=step)
            cmd.recording = True
            sent = self._recorder.send(self._lease, step)
            sent.add_done_callback(_retrieved)  # its lifecycle may be cancelled unstarted
            self._sent_values[position] = (step, sent)

    async def value_durable(self, cmd: Command) -> None:
        """Return once value `cmd` is durable (sent now if it has not gone yet: whatever it
        depends on is durable by now, see `CommandTasks._lifecycle`)."""
        self.send_values()
        sent = self._sent_values.get(cmd.position)
        if sent is None:
            return  # the execution stops: nothing more is recorded
        step, future = sent
        try:
            status = await future
        finally:
            del self._sent_values[cmd.position]
            cmd.recording = False
            self.wake_gated()  # failed: the execution stops, and nothing more starts
        self._markers.discard(cmd.position)
        assert step.seq is not None
        self._durable(step.seq, cmd)
        if status == "canceled":  # its NOTIFY did not reach us
            self._reader.halt(Stop("canceled", "canceled"))

    async def durable_through(self, seq: int, position: int | None = None) -> None:
        """Wait until every result up to `seq` is durable (and, for a command at
        `position`, every patch marker before it), or the execution stops."""
        while not self._reader.stopped and (
            (self._in_flight and min(self._in_flight) <= seq)
            or (position is not None and self._markers and min(self._markers) < position)
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
        lease = self._lease
        written = await self._store.steps.record_many(
            lease.worker_id, [(lease, step) for _, step in pending]
        )
        if len(written) < len(pending):
            async with self._store.db.transaction() as tx:
                await self._store.steps.check_lease(tx, lease)
        for seq, step in pending:
            self._durable(seq, self._reader.commands[step.position])

    async def record(self, step: PendingStep) -> None:
        await self._recorder.record(self._lease, step)

    async def settle(
        self, cmd: Command, step: PendingStep, value: Any = None, error: BaseException | None = None
    ) -> None:
        """Record a step's outcome as the next entry of the log and deliver it."""
        step.seq = self.reserve()
        self.publish(step.seq, cmd, value, error, record=step)
        cmd.recording = True
        self.changed.set()
        status = await self._recorder.record(self._lease, step)
        cmd.recording = False
        self._durable(step.seq, cmd)
        if status == "canceled":  # its NOTIFY did not reach us
            self._reader.halt(Stop("canceled", "canceled"))

    async def settle_durable(self, cmd: Command, step: PendingStep, value: Any) -> None:
        """Record an outcome as the next entry of the log, and deliver it once durable
        (later outcomes wait for it: its seq is reserved until then)."""
        step.seq = self.reserve()
        cmd.recording = True
        try:
            status = await self._recorder.record(self._lease, step)
        except BaseException:
            self.unreserve(step.seq)
            raise
        finally:
            cmd.recording = False
        self.publish(step.seq, cmd, value)
        if status == "canceled":  # its NOTIFY did not reach us
            self._reader.halt(Stop("canceled", "canceled"))

    def deliver(self) -> None:
        """Hand the workflow every outcome it may have now, in `seq` order."""
        while self._outbox and not self._reader.stopped:
            seq = min(self._outbox)
            if self._unpublished and min(self._unpublished) < seq:
                return
            cmd, outcome = self._outbox.pop(seq)
            self.delivered = seq
            if not self._reader.receive(cmd, outcome) and cmd.kind == "signal-wait":
                self._reader.give_back(cmd, seq)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as read (none is logged as "never retrieved")."""
    if not future.cancelled():
        future.exception()
