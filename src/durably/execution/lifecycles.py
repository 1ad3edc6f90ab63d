"""The lifecycles of an execution's commands: each command the workflow issued runs as a
task on the worker's loop once every result it could depend on is durable; the engine's
own failures in one stop the execution, a defect poisons it. When the execution ends, no
lifecycle outlives it: bodies are interrupted, given `SETTLE_S`, then their lifecycles are
cancelled and awaited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..store.records import Lease
from ..workflow.commands import Command
from .claimed import Claimed, is_engine_failure
from .kinds import run_lifecycle
from .runlog import RunLog, Stop

log = logging.getLogger("durably.worker")

# How long a stopping execution waits for its step bodies to notice the cancel.
SETTLE_S = 5.0


class Lifecycles:
    """Part of `Execution`: its commands' lifecycle tasks."""

    lease: Lease
    commands: dict[int, Command]
    _to_start: list[Command]
    _active: dict[asyncio.Task[None], Command]
    _home: asyncio.AbstractEventLoop | None
    _changed: asyncio.Event
    replaying: bool
    collect_only: bool
    concluded: bool
    interrupting: bool
    fatal: BaseException | None
    stop: Any
    poison: Callable[[BaseException], None]
    _arm: Callable[[Command], None]
    log: RunLog
    _claimed: Callable[[], Claimed]  # the execution, as its commands' lifecycles see it

    def _start_issued(self) -> None:
        if self.replaying or self.collect_only or self.fatal or self.stop:
            return
        # Values the pass read join the records it followed, still waiting for their
        # statement: now, before the recorder's turn sends them (`RunLog.send_values`).
        self.log.send_values()
        commands, self._to_start = self._to_start, []
        for cmd in commands:
            self._spawn(cmd, self._lifecycle(cmd))

    def _spawn(self, cmd: Command, work: Coroutine[Any, Any, None]) -> None:
        cmd.active = True
        task = self._home_loop().create_task(work)
        self._active[task] = cmd
        task.add_done_callback(self._lifecycle_done)

    def _home_loop(self) -> asyncio.AbstractEventLoop:
        assert self._home is not None
        return self._home

    def _lifecycle_done(self, task: asyncio.Task[Any]) -> None:
        cmd = self._active.pop(task, None)
        if cmd is not None:
            cmd.active = False
            if cmd.wait is not None and not cmd.settled:
                self._arm(cmd)
        if not self._active:  # the drive looks again only when nothing is left running
            self._changed.set()

    async def _lifecycle(self, cmd: Command) -> None:
        try:
            await self.log.durable_through(cmd.gate, cmd.position)
            if self.stop is None and self.fatal is None:
                await run_lifecycle(self._claimed(), cmd)
        except Exception as exc:
            if self.concluded:
                # A record that raced the run's end: the end wrote it, or (refused, or a
                # compensating end) `write_in_flight` writes it before any undo is chosen.
                return
            if is_engine_failure(exc):
                self.halt(Stop(f"{type(exc).__name__}: {exc}"))
            elif self.fatal is None:
                log.error("run %s: step %r: unexpected error", self.lease.run_id, cmd.name,
                          exc_info=exc)  # fmt: skip
                self.poison(exc)

    def halt(self, stop: Stop) -> None:
        """Stop driving the workflow and interrupt every step body in flight."""
        if stop.replaces(self.stop):
            self.stop = stop
        self.interrupt_bodies()
        self.log.wake_gated()
        self._changed.set()

    def interrupt_bodies(self) -> None:
        """Cancel the bodies in flight; a sync body is only asked (`ctx.cancelled`).

        A thread cannot be interrupted: cancelling its future would only stop waiting for
        it. A run let go (a drain's release) while one runs would be claimed and its step
        run again beside it, so such a body is `kept`: it keeps its future, and the run
        (its lease renewed) until its lifecycle ends, its outcome recorded.
        """
        self.interrupting = True
        keep = self.stop is not None and self.stop.release
        for cmd in self.commands.values():
            if cmd.step_context is not None:
                cmd.step_context.cancelled.set()
            if cmd.body is None:
                continue
            if keep and cmd.in_thread:
                cmd.kept = cmd.kept or not cmd.body.done()
            else:
                cmd.body.cancel()

    def _kept(self) -> list[asyncio.Task[None]]:
        """The lifecycles of kept commands (see `interrupt_bodies`) still running: their
        body may have returned, but the run is not let go before its record is written.
        None of them once the stop is no longer a release (a cancel, a lost lease)."""
        if self.stop is None or not self.stop.release:
            return []
        return [task for task, cmd in self._active.items() if cmd.kept]

    def _undoing(self) -> list[asyncio.Task[None]]:
        """The lifecycles of `compensate()` calls still running: undos are never
        interrupted, so the run is not let go, retried or ended before they are done and
        recorded (the next attempt or owner would run them again). None of them once the
        run is not ours (a lost lease)."""
        if self.stop is not None and self.stop.status is None and not self.stop.release:
            return []
        return [task for task, cmd in self._active.items() if cmd.kind == "compensate"]

    async def _quiesce(self, fold: bool = False) -> None:
        """Interrupt bodies still running and wait until every lifecycle has ended (with
        `fold`, or is only writing its record: the run's end will write it): for at most
        `SETTLE_S`, but those of kept commands and of `compensate()` calls to their end
        (see `interrupt_bodies`, `_undoing`)."""
        self.interrupt_bodies()
        loop = asyncio.get_running_loop()
        until, told = loop.time() + SETTLE_S, False
        while True:
            kept = self._kept()
            held = [*kept, *self._undoing()]
            busy = [t for t, cmd in self._active.items() if not (fold and cmd.recording)]
            if not held and (not busy or loop.time() >= until):
                return
            if kept and not told:
                told = True
                log.warning("run %s: step %r runs in a thread, which cannot be interrupted: "
                            "the run is kept until it returns", self.lease.run_id,
                            self._active[kept[0]].name)  # fmt: skip
            self._changed.clear()
            changed = loop.create_task(self._changed.wait())
            await asyncio.wait([*busy, *held, changed],
                               timeout=None if held else until - loop.time(),
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            changed.cancel()

    async def _end_lifecycles(self) -> None:
        """No lifecycle outlives its execution: those still running (a body that ignores
        cancellation kept its lifecycle past `_quiesce`) get `SETTLE_S` more, then are
        cancelled and awaited. A lifecycle stops waiting for its body when cancelled (see
        `steps._invoke`): such a body is user code left running, logged, and nothing
        of it is recorded (its attempt is abandoned or canceled by the run's next owner)."""
        for cancel in (False, True):
            tasks = list(self._active)
            if not tasks:
                return
            if cancel:
                for task in tasks:
                    cmd = self._active.get(task)
                    if cmd is not None and cmd.body is not None and not cmd.body.done():
                        log.error("run %s: step %r ignored cancellation for %gs; its body is "
                                  "left running and its outcome will not be recorded",
                                  self.lease.run_id, cmd.name, 2 * SETTLE_S)  # fmt: skip
                    task.cancel()
            await asyncio.wait(tasks, timeout=SETTLE_S)
        for task in self._active:
            log.error("run %s: step %r did not end after cancellation", self.lease.run_id,
                      self._active[task].name)  # fmt: skip
