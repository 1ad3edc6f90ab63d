"""What a step body is handed: `StepContext` (its run, attempt and fencing token; ways
to notice a cancel and to renew the lease), and `Fence`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, NamedTuple


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
