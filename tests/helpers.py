"""Waiting on conditions with a deadline (never a bare sleep)."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    check: Callable[[], Awaitable[Any] | Any], timeout: float = 10.0, what: str = "condition"
) -> Any:
    """Poll `check` until it returns something truthy; that value. Fails after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def eventually_sync(
    check: Callable[[], Any], timeout: float = 10.0, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def stop_processes(procs: list[subprocess.Popen[Any]]) -> None:
    """SIGTERM (after SIGCONT, in case a test froze one) and wait; SIGKILL the stubborn."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
