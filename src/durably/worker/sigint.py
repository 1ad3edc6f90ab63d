"""Ctrl-C in a program that embeds a worker on its main thread (and owns SIGINT)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType


def defer_sigint(loop: asyncio.AbstractEventLoop) -> Callable[[], None] | None:
    """While a worker runs on the main thread and the program owns SIGINT (an embedded
    worker), run the program's handler on the worker's loop, between its callbacks, not at
    whatever line the signal arrived: a KeyboardInterrupt the handler raises then stops the
    loop as the program meant (asyncio's runner, or Python's default), and is never caught
    in user code on that thread as a KeyboardInterrupt the code raised, which fails its step
    (SPEC §4.20). How to restore the program's handler; None if not installed."""
    if threading.current_thread() is not threading.main_thread():
        return None  # a signal raises nothing in this thread
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # ignored, or the OS's default: no KeyboardInterrupt
        return None
    handler = previous

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if loop.is_running() and not loop.is_closed():
            loop.call_soon_threadsafe(handler, signum, None)
        else:  # the loop was stopped (by an earlier Ctrl-C?): nothing runs it there
            handler(signum, frame)

    try:
        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main interpreter
        return None

    def restore() -> None:
        if signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, previous)

    return restore
