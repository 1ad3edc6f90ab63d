"""Reports code that blocks the worker's event loop (a step body or workflow code doing
blocking work), naming where it is stuck. Nothing else moves while the loop is blocked:
heartbeats stop, leases run out, other runs stall, so it is worth a loud warning.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("durably.worker")


class LoopWatchdog:
    """A thread that pings the loop every `interval` s and warns when it stops answering."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float = 2.0) -> None:
        self._loop = loop
        self._threshold = threshold
        self._loop_thread = threading.get_ident()
        self._answered = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="durably-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _pong(self) -> None:
        self._answered = time.monotonic()

    def _watch(self) -> None:
        reported = False
        while not self._stop.wait(self._threshold / 4):
            try:
                self._loop.call_soon_threadsafe(self._pong)
            except RuntimeError:  # the loop is closed
                return
            blocked = time.monotonic() - self._answered
            if blocked < self._threshold:
                reported = False
            elif not reported:
                reported = True
                frame = sys._current_frames().get(self._loop_thread)
                where = "".join(traceback.format_stack(frame, limit=4)) if frame else "?"
                log.warning(
                    "the worker's event loop has been blocked for %.1fs; blocking code in an "
                    "async step body or in workflow code stalls every run of this worker "
                    "(make the body a plain `def`, which runs in a thread). It is at:\n%s",
                    blocked, where,
                )  # fmt: skip
