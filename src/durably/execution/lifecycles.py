"""The lifecycles of an execution's commands: each command the workflow issued runs as a
task on the worker's loop once every result it could depend on is durable; the engine's
own failures in one stop the execution, a defect poisons it. When the execution ends, no
lifecycle outlives it: bodies are interrupted, given `SETTLE_S`, then their lifecycles are
cancelled and awaited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from ..workflow.commands import Command
from .claimed import is_engine_failure
from .runlog import RunLog, Stop

log = logging.getLogger("durably.worker")

# How long a stopping execution waits for its step bodies to notice the cancel.
SETTLE_S = 5.0


class Driven(Protocol):
    """The execution, as the tasks of its commands see it: whether, and why, it stops."""

    @property
    def stop(self) -> Stop | None:
        """Why it stops before its workflow ends (None: it goes on)."""
        ...

    @property
    def fatal(self) -> BaseException | None:
        """What poisoned it (None: nothing)."""
        ...

    def halt(self, stop: Stop) -> None:
        """Stop driving the workflow, and interrupt the bodies in flight."""
        ...

    def poison(self, error: BaseException) -> None:
        """Never drive the workflow again: the run fails with `error`."""
        ...


class CommandTasks:
    """The tasks of one execution's commands, on the worker's loop (`home`).

    A command the workflow issued is queued (`queue`), then started by the drive
    (`start_queued`) as the lifecycle of its kind. Once the execution has concluded (the
    run parked, or its end is being written) nothing more is taken up, and a lifecycle that
    fails raced that end, which settles what it was writing.
    """

    def __init__(
        self,
        run: Driven,
        run_id: str,
        commands: Mapping[int, Command],
        log: RunLog,
        changed: asyncio.Event,
        lifecycle: Callable[[Command], Coroutine[Any, Any, None]],
        on_wait: Callable[[Command], None],
    ) -> None:
        self._run = run
        self._run_id = run_id
        self._commands = commands  # every command the workflow issued, by position
        self._log = log  # a lifecycle starts once what it may depend on is durable
        self._changed = changed  # set whenever the drive should look again
        self._run_kind = lifecycle  # what a command's kind does (`kinds.run_lifecycle`)
        self._on_wait = on_wait  # a lifecycle ended, its command waiting (`LiveWaits.arm`)
        self._to_start: list[Command] = []
        self._active: dict[asyncio.Task[None], Command] = {}
        self.home: asyncio.AbstractEventLoop | None = None  # the worker's, once it runs
        self.concluded = False
        self.interrupting = False  # bodies are being cancelled by the engine

    def queue(self, cmd: Command) -> None:
        """`cmd` is to run its lifecycle (from the drive's next `start_queued`)."""
        self._to_start.append(cmd)

    def unqueue(self, cmd: Command) -> bool:
        """`cmd` is no longer to start; False if it was not queued."""
        if cmd not in self._to_start:
            return False
        self._to_start.remove(cmd)
        return True

    def idle(self) -> bool:
        """No lifecycle runs, and none is queued."""
        return not (self._active or self._to_start)

    def start_queued(self) -> None:
        """Start the lifecycles of the commands queued (each once what it may depend on
        is durable: `_lifecycle`)."""
        commands, self._to_start = self._to_start, []
        for cmd in commands:
            self.spawn(cmd, self._lifecycle(cmd))

    def spawn(self, cmd: Command, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` for `cmd` as one of its lifecycles' tasks."""
        cmd.active = True
        task = self.home_loop().create_task(work)
        self._active[task] = cmd
        task.add_done_callback(self._lifecycle_done)

    def home_loop(self) -> asyncio.AbstractEventLoop:
        assert self.home is not None
        return self.home

    def _lifecycle_done(self, task: asyncio.Task[Any]) -> None:
        cmd = self._active.pop(task, None)
        if cmd is not None:
            cmd.active = False
            if cmd.wait is not None and not cmd.settled:
                self._on_wait(cmd)
        if not self._active:  # the drive looks again only when nothing is left running
            self._changed.set()

    async def _lifecycle(self, cmd: Command) -> None:
        run = self._run
        try:
            await self._log.durable_through(cmd.gate, cmd.position)
            if run.stop is None and run.fatal is None:
                await self._run_kind(cmd)
        except Exception as exc:
            if self.concluded:
                # A record that raced the run's end: the end wrote it, or (refused, or a
                # compensating end) `write_in_flight` writes it before any undo is chosen.
                return
            if is_engine_failure(exc):
                run.halt(Stop(f"{type(exc).__name__}: {exc}"))
            elif run.fatal is None:
                log.error("run %s: step %r: unexpected error", self._run_id, cmd.name,
                          exc_info=exc)  # fmt: skip
                run.poison(exc)

    def interrupt_bodies(self) -> None:
        """Cancel the bodies in flight; a sync body is only asked (`ctx.cancelled`).

        A thread cannot be interrupted: cancelling its future would only stop waiting for
        it. A run let go (a drain's release) while one runs would be claimed and its step
        run again beside it, so such a body is `kept`: it keeps its future, and the run
        (its lease renewed) until its lifecycle ends, its outcome recorded.
        """
        self.interrupting = True
        stop = self._run.stop
        keep = stop is not None and stop.release
        for cmd in self._commands.values():
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
        stop = self._run.stop
        if stop is None or not stop.release:
            return []
        return [task for task, cmd in self._active.items() if cmd.kept]

    def _undoing(self) -> list[asyncio.Task[None]]:
        """The lifecycles of `compensate()` calls still running: undos are never
        interrupted, so the run is not let go, retried or ended before they are done and
        recorded (the next attempt or owner would run them again). None of them once the
        run is not ours (a lost lease)."""
        stop = self._run.stop
        if stop is not None and stop.status is None and not stop.release:
            return []
        return [task for task, cmd in self._active.items() if cmd.kind == "compensate"]

    async def quiesce(self, fold: bool = False) -> None:
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
                            "the run is kept until it returns", self._run_id,
                            self._active[kept[0]].name)  # fmt: skip
            self._changed.clear()
            changed = loop.create_task(self._changed.wait())
            await asyncio.wait([*busy, *held, changed],
                               timeout=None if held else until - loop.time(),
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            changed.cancel()

    async def end(self) -> None:
        """No lifecycle outlives its execution: those still running (a body that ignores
        cancellation kept its lifecycle past `quiesce`) get `SETTLE_S` more, then are
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
                                  self._run_id, cmd.name, 2 * SETTLE_S)  # fmt: skip
                    task.cancel()
            await asyncio.wait(tasks, timeout=SETTLE_S)
        for task in self._active:
            log.error("run %s: step %r did not end after cancellation", self._run_id,
                      self._active[task].name)  # fmt: skip
