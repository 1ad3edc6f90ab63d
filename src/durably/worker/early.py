"""Cancels notified before their run is executed here.

A claim commits, then its reply travels back: a cancel committed in between notifies the
worker while it does not execute the run yet, and finds nothing to halt. Its run would then
start and run its first body until the next heartbeat. So such notifications are kept, for
one lease (longer than any claim's round trip), and the claim that brings one of those runs
asks the database at once. Only asks: the run may have been resumed since the cancel.
"""

from __future__ import annotations

MAX_KEPT = 4096  # a burst of cancels of runs elsewhere must not grow a worker without end


class EarlyCancels:
    """Run ids of `cancel:` notifications for runs not executed here, each until a time."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self._until: dict[str, float] = {}  # in the order they came

    def remember(self, run_id: str, now: float) -> None:
        self._until.pop(run_id, None)
        self._until[run_id] = now + self.keep_s
        while self._until:  # the oldest first: expired, or too many
            oldest, until = next(iter(self._until.items()))
            if until > now and len(self._until) <= MAX_KEPT:
                break
            del self._until[oldest]

    def claimed(self, run_id: str, now: float) -> bool:
        """`run_id` was just claimed: True if a cancel of it came shortly before."""
        until = self._until.pop(run_id, None)
        return until is not None and until > now
