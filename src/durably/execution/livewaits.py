"""Waits while a run executes: a sleep, a time-out or a retry back-off fires on time beside
bodies that are still working; a signal or a child's end that arrives meanwhile is picked
up (`poke`, even while the wait's lifecycle is still running: it is kept for its end); a
wait the workflow stopped awaiting (a `wait_first` loser) ends, giving back a signal
already delivered to it, or taken by it if it ended too. A signal given back goes to the
run's next wait on that name if one began meanwhile (it is taken up at once), else to the
run's buffer. When nothing but waits is left, the run parks instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..store.giveback import GiveBacks
from ..store.records import Lease
from ..workflow.commands import Command
from .lifecycles import CommandTasks, Driven
from .runlog import RunLog, Stop


class LiveWaits:
    """The waits of one execution's commands while it runs (see the module), on the
    tasks of its commands; it reads the execution's stop through `Driven`."""

    def __init__(
        self,
        run: Driven,
        tasks: CommandTasks,
        commands: Mapping[int, Command],
        givebacks: GiveBacks,
        lease: Lease,
        log: RunLog,
        now: Callable[[], datetime],
        changed: asyncio.Event,
        collect_only: bool,
    ) -> None:
        self._run = run
        self._tasks = tasks  # a wait taken up is queued there; one ending runs as a task
        self._commands = commands  # every command the workflow issued, by position
        self._givebacks = givebacks  # where a wait that ends gives its signal back
        self._lease = lease
        self._log = log  # a signal goes back once the record of the wait's end is durable
        self._now = now  # the database's time, estimated
        self._changed = changed  # set whenever the drive should look again
        self._collect_only = collect_only  # the run only undoes: it gives nothing back

    def arm(self, cmd: Command) -> None:
        """A command waits: take it up again at its wake time if this claim still runs
        then (a sleep or time-out beside a body that is still working)."""
        assert cmd.wait is not None
        if cmd.abandoned:
            self._tasks.spawn(cmd, self._abandon(cmd, cmd.wait.attempt))
            return
        if cmd.poke_kept:  # something arrived while its lifecycle ran: look now
            self._take_up(cmd, True)
            return
        if cmd.wait.wake_at is not None:
            delay = max((cmd.wait.wake_at - self._now()).total_seconds(), 0.0)
            cmd.timer = self._tasks.home_loop().call_later(delay, self._take_up, cmd, False)

    def _take_up(self, cmd: Command, poked: bool) -> None:
        run = self._run
        if run.stop or run.fatal or self._tasks.concluded or cmd.settled or cmd.abandoned:
            return
        if cmd.active or cmd.wait is None:
            # Its lifecycle runs, or is yet to run: it may have looked before what the poke
            # announces was there. The poke is kept for when it leaves a wait (`arm`).
            cmd.poke_kept = cmd.poke_kept or poked
            return
        if cmd.timer is not None:
            cmd.timer.cancel()
        cmd.recorded, cmd.wait, cmd.timer = cmd.wait.resume(cmd), None, None
        cmd.poked, cmd.poke_kept = poked, False
        self._tasks.queue(cmd)
        self._changed.set()

    def poke(self) -> None:
        """Something may have arrived for this run (a signal, a child's end): look again."""
        for cmd in list(self._commands.values()):
            if cmd.kind in ("signal-wait", "child"):
                self._take_up(cmd, poked=True)

    def awaited_no_more(self, cmd: Command, future: asyncio.Future[Any]) -> None:
        """The workflow cancelled its wait for `cmd` (a `wait_first` loser): a step in
        flight finishes and is recorded; a wait ends, giving back a delivered signal."""
        if not future.cancelled() or cmd.settled:
            return
        cmd.abandoned = True
        if self._tasks.unqueue(cmd):
            rec = cmd.recorded
            if rec is not None and rec.waiting and not self._collect_only:
                self._tasks.spawn(cmd, self._abandon(cmd, rec.attempt))
        elif cmd.wait is not None and not cmd.active:
            if cmd.timer is not None:
                cmd.timer.cancel()
            self._tasks.spawn(cmd, self._abandon(cmd, cmd.wait.attempt))

    def cancel_timers(self) -> None:
        """The execution ended: a parked run holds no timer (nor memory)."""
        for cmd in self._commands.values():
            if cmd.timer is not None:
                cmd.timer.cancel()

    def give_back(self, cmd: Command, seq: int) -> None:
        """The workflow stopped awaiting signal wait `cmd` after it ended (log entry `seq`):
        the signal it took goes back to the run, once its record is durable. Both waits of
        a `wait_first` may end before the workflow sees the first."""
        if not self._collect_only:
            self._tasks.spawn(cmd, self._give_back(cmd, seq))

    async def _give_back(self, cmd: Command, seq: int) -> None:
        assert cmd.signal is not None
        run = self._run
        try:
            await self._log.durable_through(seq)
            if run.stop is None and run.fatal is None:  # else the next claim's replay does
                self._given_to(
                    await self._givebacks.give_back_signal(
                        self._lease, cmd.signal, cmd.position, seq
                    )
                )
        except Exception as exc:
            if not self._tasks.concluded:
                run.halt(Stop(f"{type(exc).__name__}: {exc}"))

    async def _abandon(self, cmd: Command, attempt: int) -> None:
        try:
            self._given_to(
                await self._givebacks.abandon_wait(self._lease, cmd.position, attempt, cmd.signal)
            )
        except Exception as exc:
            if not self._tasks.concluded:
                self._run.halt(Stop(f"{type(exc).__name__}: {exc}"))
        cmd.wait = None

    def _given_to(self, position: int | None) -> None:
        """A signal given back went to the run's wait at `position` (it began while the
        signal was on its way back): take that wait up, as a send's poke would."""
        cmd = self._commands.get(position) if position is not None else None
        if cmd is not None:
            self._take_up(cmd, poked=True)
