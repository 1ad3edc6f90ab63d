"""The event loop workflow code runs on: deterministic, driven by the run's log.

Workflow code never runs on the worker's loop. It runs here, one pass at a time: the
execution delivers one recorded result, then runs this loop until every coroutine of the
workflow is blocked again (`run_until_blocked`). Callbacks run strictly in the order they
were scheduled, nothing here depends on wall-clock time or I/O, so `asyncio.gather`,
`asyncio.wait` and tasks the code creates interleave exactly as they did the first time:
completion order is data (the log), never timing. This is how Temporal's Python replayer
works; durably's is smaller because its results arrive as a plain ordered list.

What cannot be replayed is refused at the call: timers (`asyncio.sleep(n)`,
`asyncio.wait_for`, `asyncio.timeout`), executors and other threads raise
`WorkflowMisuseError`, and so does I/O (sockets, pipes, subprocesses; see `noio`).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import Executor
from typing import Any, NoReturn, TypeVar, TypeVarTuple

from ..core.errors import WorkflowMisuseError
from .noio import NoIOLoop

T = TypeVar("T")
_Ts = TypeVarTuple("_Ts")
log = logging.getLogger("durably.worker")


class WorkflowLoop(NoIOLoop):
    """A single-threaded, timer-less loop that runs only when told to."""

    def __init__(self, on_misuse: Callable[[WorkflowMisuseError], None]) -> None:
        self._ready: collections.deque[asyncio.Handle] = collections.deque()
        self._on_misuse = on_misuse
        self._closed = False
        self._running = False

    # ------------------------------------------------------------------ driving

    def run_until_blocked(self) -> None:
        """Run ready callbacks (and what they schedule) until none is left."""
        outer = asyncio._get_running_loop()
        asyncio._set_running_loop(self)
        self._running = True
        try:
            while self._ready:
                handle = self._ready.popleft()
                if not handle.cancelled():
                    try:
                        handle._run()
                    except (SystemExit, KeyboardInterrupt) as exc:
                        # Workflow code raised it (argparse, click): asyncio lets these two
                        # out of the loop once the task has kept it as its outcome, which
                        # fails the run by its policy as any error (SPEC §4.20).
                        self.call_exception_handler({"message": repr(exc), "exception": exc})
        finally:
            self._running = False
            asyncio._set_running_loop(outer)

    def close(self) -> None:
        self._closed = True
        self._ready.clear()

    # ------------------------------------------------------------------ what asyncio uses

    def call_soon(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context)
        if not self._closed:
            self._ready.append(handle)
        return handle

    def call_soon_threadsafe(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> NoReturn:
        self._refuse("scheduling from another thread")

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self,
        coro: Coroutine[Any, Any, T] | Generator[Any, None, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def time(self) -> float:
        self._refuse("reading the loop's clock")

    def call_later(
        self,
        delay: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> NoReturn:
        self._refuse("a timer (asyncio.sleep, wait_for, timeout); use ctx.step.sleep")

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> NoReturn:
        self._refuse("a timer (asyncio.sleep, wait_for, timeout); use ctx.step.sleep")

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*_Ts], T], *args: *_Ts
    ) -> NoReturn:
        self._refuse("run_in_executor; do the work in a step (ctx.step.run)")

    def get_exception_handler(self) -> None:
        return None

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        # A task of the workflow destroyed while pending, or an exception nobody
        # retrieved: the workflow's outcome is decided elsewhere; keep it for debugging.
        log.debug("workflow loop: %s", context.get("message"))

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    def _no_io(self, what: str) -> NoReturn:
        self._refuse(f"I/O (loop.{what}: sockets, pipes, subprocesses)")

    def _refuse(self, what: str) -> NoReturn:
        error = WorkflowMisuseError(
            f"workflow code cannot use {what}: it cannot be replayed deterministically"
        )
        self._on_misuse(error)
        raise error
