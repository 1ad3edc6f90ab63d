"""Queues as workflow code declares them: `app.queue(name, concurrency=, per_key=, rate=,
priority=, on_full=)` (SPEC §4.17, §4.23). The claim side (SQL) is `store.queues`, the
start side of `on_full` `store.admission`, the worker's claim policy `worker.claimer`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..core.durations import parse_duration
from ..core.errors import ConfigurationError, InvalidInput

#: What a start does when its `concurrency_key` is full (SPEC §4.23): queue behind (the
#: default), cancel the key's older runs so that the newest runs, or cancel itself.
ON_FULL = ("wait", "cancel_running", "cancel_new")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_RATE = re.compile(r"\s*(\d+)\s*/\s*(.+?)\s*")


def parse_rate(rate: str) -> tuple[int, float]:
    """`"10/1m"` → (10, 60.0): at most 10 first claims in any window of 60 seconds.

    Raises:
        ConfigurationError: not `N/DURATION` with N ≥ 1 and a positive duration.
    """
    match = _RATE.fullmatch(rate) if isinstance(rate, str) else None
    if match is None:
        raise ConfigurationError(f"invalid rate {rate!r}: write it as N/DURATION, e.g. '10/1m'")
    count = int(match.group(1))
    period = match.group(2)
    try:
        seconds = parse_duration(period if period[0].isdigit() else f"1{period}").total_seconds()
    except ConfigurationError as exc:
        raise ConfigurationError(f"invalid rate {rate!r}: {exc}") from exc
    if count < 1 or seconds <= 0:
        raise ConfigurationError(f"invalid rate {rate!r}: the count and period must be > 0")
    return count, seconds


def _limit(name: str, value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"queue {name!r}: {what} must be a whole number ≥ 1: {value!r}")
    return value


@dataclass(frozen=True)
class Queue:
    """A queue declared with `app.queue(...)`; pass it as `@app.workflow(queue=q)`.

    Attributes:
        name: the queue's name (runs store it; `durably runs --queue NAME`).
        concurrency: at most this many of its runs `running` at once (None: no cap).
        per_key: at most this many running per `concurrency_key` (None: no cap).
        rate: `"N/DURATION"`, at most N first claims in any window (None: no cap).
        priority: claim the larger `priority` of `start(..., priority=)` first.
        on_full: what a start whose key is full does (needs `per_key` unless "wait"):
            "wait" queues it; "cancel_running" cancels the key's older runs (their
            compensations run) so that the newest `per_key` run; "cancel_new" cancels
            the newcomer at once (a singleton per key).
    """

    name: str
    concurrency: int | None = None
    per_key: int | None = None
    rate: str | None = None
    priority: bool = False
    on_full: str = "wait"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigurationError(
                f"invalid queue name {self.name!r}: use 1-100 letters, digits and _ . : -"
            )
        _limit(self.name, self.concurrency, "concurrency")
        _limit(self.name, self.per_key, "per_key")
        if self.rate is not None:
            parse_rate(self.rate)
        if not isinstance(self.on_full, str) or self.on_full not in ON_FULL:
            raise InvalidInput(
                f"queue {self.name!r}: on_full must be one of {', '.join(ON_FULL)}, "
                f"not {self.on_full!r}"
            )
        if self.on_full != "wait" and self.per_key is None:
            raise InvalidInput(
                f"queue {self.name!r}: on_full={self.on_full!r} acts on a full "
                "concurrency_key: declare per_key too, e.g. app.queue(..., per_key=1)"
            )

    def params(self, ttl_s: float) -> dict[str, Any]:
        """The queue's row, as `upsert_queue` takes it (declared for `ttl_s` seconds)."""
        count, period = parse_rate(self.rate) if self.rate is not None else (None, None)
        return {"name": self.name, "concurrency": self.concurrency, "per_key": self.per_key,
                "rate_limit": count, "rate_period_s": period,
                "priority": self.priority, "on_full": self.on_full,
                "ttl": ttl_s}  # fmt: skip

    def check_start(self, workflow: str, concurrency_key: str | None, priority: int) -> None:
        """Refuse start options this queue cannot honour (nothing is written)."""
        if concurrency_key is not None and not isinstance(concurrency_key, str):
            raise InvalidInput(f"concurrency_key must be text, not {concurrency_key!r}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidInput(f"priority must be a whole number, not {priority!r}")
        if priority != 0 and not self.priority:
            raise InvalidInput(
                f"workflow {workflow!r}: queue {self.name!r} does not order by priority; "
                "declare it with app.queue(..., priority=True)"
            )


def check_unqueued(workflow: str, concurrency_key: str | None, priority: int) -> None:
    """`concurrency_key` and `priority` need a queue: refuse them on a workflow without."""
    if concurrency_key is not None or priority != 0:
        raise InvalidInput(
            f"workflow {workflow!r} has no queue: concurrency_key and priority apply only to "
            "workflows declared with @app.workflow(..., queue=app.queue(...))"
        )
