"""Fault injection for drills and tests: `ACQUIRE_FAULT=<name>:<marker file>` makes the
named fault happen once (the marker file records that it did). Off unless set."""

from __future__ import annotations

import os
from pathlib import Path


class InjectedFault(ConnectionError):
    """A fault injected on purpose (ACQUIRE_FAULT)."""


def maybe(name: str) -> None:
    """Raise InjectedFault once if ACQUIRE_FAULT names this fault."""
    spec = os.environ.get("ACQUIRE_FAULT", "")
    fault, _, marker = spec.partition(":")
    if fault != name or not marker:
        return
    try:
        Path(marker).touch(exist_ok=False)
    except FileExistsError:
        return
    raise InjectedFault(f"injected fault {name!r}")


def maybe_kill(name: str) -> None:
    """Kill this process with SIGKILL once if ACQUIRE_FAULT names this fault."""
    try:
        maybe(name)
    except InjectedFault:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def copy_delay() -> float:
    """Seconds to pause per copied chunk (`ACQUIRE_FAULT=slow-copy:<seconds>`), else 0."""
    fault, _, value = os.environ.get("ACQUIRE_FAULT", "").partition(":")
    return float(value) if fault == "slow-copy" and value else 0.0
