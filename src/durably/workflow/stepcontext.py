"""What a step body is handed: `StepContext` (its run, attempt and fencing token; ways
to notice a cancel and to renew the lease), and `Fence`."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

log = logging.getLogger("durably.worker")


class Fence(NamedTuple):
    """A run's fencing token: strictly increasing with every claim of the run.

    Pass it to systems outside the database and have them refuse a token lower than the
    highest they have seen; that keeps a worker that lost its lease from acting.
    """

    run_id: str
    fence: int


@dataclass(eq=False)
class StepContext:
    """Handed to a step body that declares it as its first parameter.

    Example:
        ```python
        def copy(ctx: StepContext, src: str, dst: str) -> str:
            for chunk in chunks(src):
                ctx.raise_if_cancelled()
                ...
        ```
    """

    run_id: str
    step: str
    attempt: int
    fence: Fence
    cancelled: threading.Event = field(default_factory=threading.Event)
    _heartbeat: Callable[[], Coroutine[Any, Any, None]] | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stream: Callable[[str, Any], Coroutine[Any, Any, int]] | None = None

    def raise_if_cancelled(self) -> None:
        """Raise `asyncio.CancelledError` if the run was canceled or its lease was lost."""
        if self.cancelled.is_set():
            raise asyncio.CancelledError(f"step {self.step!r} of run {self.run_id} was cancelled")

    def heartbeat(self) -> None:
        """Renew the run's lease now (a long step may call this between chunks of work)."""
        if self._heartbeat is None or self._loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._loop.create_task(self._heartbeat())
        else:
            asyncio.run_coroutine_threadsafe(self._heartbeat(), self._loop).result(timeout=30)

    def write_stream(self, key: str, value: Any) -> Awaitable[int]:
        """Append `value` to the run's stream `key` now: readers see it at once.

        Not exactly once: this is the step's own doing, so a retried attempt (after a
        failure, a timeout, a crash) writes again what the attempt before it wrote. For a
        value written once per run, write from the workflow (`ctx.step.write_stream`).

        From a sync body (a thread) it returns once the value is durable. From an async
        body it is written in call order, and the returned awaitable (the offset) says
        when it is durable: `await sctx.write_stream(key, value)`. A value JSON cannot
        hold raises InvalidInput here; a closed stream, when the write runs.
        """
        if self._stream is None or self._loop is None:
            raise RuntimeError("this StepContext has no run to write to")
        coro = self._stream(key, value)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            task = self._loop.create_task(coro)
            task.add_done_callback(_unawaited)
            return task
        offset = asyncio.run_coroutine_threadsafe(coro, self._loop).result()
        return _Written(offset)


def _unawaited(task: asyncio.Task[int]) -> None:
    """A write the body did not await, and that failed: said in the log, not lost in it."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("a stream write of a step body failed: %s", task.exception())


class _Written:
    """A write that is durable already (from a thread): awaiting it gives its offset."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def __await__(self) -> Generator[Any, None, int]:
        return self.offset
        yield  # a generator: awaiting it returns at once
