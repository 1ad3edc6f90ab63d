"""What a page shows, worked out from the runs as read (no I/O, no HTML): the timeline's
bars, where a run comes from and what it waits for, the links between list pages. The
templates turn these into HTML; the filters below are theirs."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from ..core.attributes import parse_attributes
from ..store.models import Run, StepAttempt


def when(value: datetime | None) -> str:
    """A time as the pages write it (`-`: none)."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def pretty(value: Any) -> str:
    """A run's input or output, as JSON on several lines."""
    return json.dumps(value, indent=1, default=str)


def compact(value: Any) -> str:
    """An event's value, as JSON on one line."""
    return json.dumps(value, default=str)


def rate(queue: dict[str, Any]) -> str:
    """A queue's rate limit: `10/60s` (`-`: none)."""
    if not queue["rate_limit"]:
        return "-"
    return f"{queue['rate_limit']}/{float(queue['rate_period_s']):g}s"


def traceback_of(error: dict[str, Any]) -> str | None:
    """The traceback an error carries (its own, or its cause's)."""
    found = error.get("traceback") or (error.get("cause") or {}).get("traceback")
    return str(found) if found else None


@dataclass(frozen=True)
class Bar:
    """One step attempt on the timeline: where its bar starts and how wide it is (percent
    of the run's span), how long it took (`…`: still running)."""

    step: StepAttempt
    left: str
    width: str
    took: str


def timeline(run: Run, steps: list[StepAttempt]) -> list[Bar]:
    if not steps:
        return []
    start = min([s.started_at for s in steps] + [run.created_at])
    end = max([s.finished_at or s.started_at for s in steps] + [run.finished_at or start])
    span = max((end - start).total_seconds(), 1e-6)
    bars = []
    for s in steps:
        left = (s.started_at - start).total_seconds() / span * 100
        done = s.finished_at or s.started_at
        width = max(0.5, (done - s.started_at).total_seconds() / span * 100)
        took = f"{(done - s.started_at).total_seconds():.3f}s" if s.finished_at else "…"
        bars.append(Bar(s, f"{left:.1f}", f"{min(width, 100 - left):.1f}", took))
    return bars


def children(steps: list[StepAttempt]) -> list[str]:
    """The runs a run's steps started, once each, in the order they were started."""
    return list(dict.fromkeys(s.child_run_id for s in steps if s.child_run_id))


def waited_signals(run: Run) -> list[str]:
    """The names of the signals a waiting run waits for."""
    if run.status != "waiting" or not run.waiting_for:
        return []
    labels = [part.strip() for part in run.waiting_for.split(", ")]
    return [label.removeprefix("signal:") for label in labels if label.startswith("signal:")]


def due_at(run: Run) -> datetime | None:
    """When a pending run is due."""
    return run.available_at if run.status == "pending" else None


def wakes_at(run: Run) -> datetime | None:
    """When a waiting run wakes by itself."""
    return run.wake_at if run.status == "waiting" else None


def resumable(run: Run) -> bool:
    return run.status in ("failed", "canceled") and not run.compensating


def pages_around(
    filters: dict[str, str], offset: int, shown: int, page: int
) -> list[tuple[str, str]]:
    """The list's links to the newer and older runs: (label, href)."""
    links = []
    if offset > 0:
        links.append(("newer", f"/?{urlencode({**filters, 'offset': max(0, offset - page)})}"))
    if shown == page:
        links.append(("older", f"/?{urlencode({**filters, 'offset': offset + page})}"))
    return links


FILTERS: dict[str, Callable[..., str]] = {
    "when": when,
    "pretty": pretty,
    "compact": compact,
    "rate": rate,
    "query": urlencode,
}


def attributes_filter(filters: Mapping[str, str]) -> dict[str, Any] | None:
    """The runs list's search-attribute filter (SPEC §4.24): `KEY=VALUE`, several
    separated by `;` (`customer=c-1; amount=30`), each as `durably runs --attr` reads it."""
    text = filters.get("attr")
    if not text:
        return None
    return parse_attributes([part.strip() for part in text.split(";") if part.strip()])
