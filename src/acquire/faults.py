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
