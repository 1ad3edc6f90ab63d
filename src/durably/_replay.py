"""A run's recorded history, matched against the workflow code as it replays.

Steps are identified by their call position (the order in which the workflow calls them,
which deterministic code repeats exactly) and checked by name: a different name where
history has a step is a `NonDeterminismError`, never a silent re-run. Calls past the end
of history are new steps and run normally.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._errors import NonDeterminismError


def _instant(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return datetime.fromisoformat(value)


@dataclass
class Recorded:
    """The latest attempt recorded at one position."""

    position: int
    attempt: int
    step: str
    kind: str
    status: str
    final: bool
    compensable: bool
    signal: str | None
    child_run_id: str | None
    wake_at: datetime | None
    output: Any
    error: dict[str, Any] | None

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def failed_for_good(self) -> bool:
        return self.status == "failed" and self.final

    @property
    def waiting(self) -> bool:
        """A sleep, signal wait or child wait that has not ended yet."""
        return self.status == "running" and self.kind in ("sleep", "signal-wait", "child")


class History:
    """Latest attempt and failure count per position, from the claim's history JSON.

    Failures count within the current workflow attempt: a workflow retry gives each step
    a fresh budget, and a step that failed for good in an earlier attempt runs again.
    """

    def __init__(self, entries: list[dict[str, Any]], workflow_attempt: int = 1) -> None:
        self.attempts = len(entries)
        self._latest: dict[int, Recorded] = {}
        self._failures: dict[int, int] = {}
        for e in entries:
            rec = Recorded(
                position=e["position"], attempt=e["attempt"], step=e["step"], kind=e["kind"],
                status=e["status"], final=bool(e["final"]), compensable=bool(e["compensable"]),
                signal=e.get("signal"), child_run_id=e.get("child_run_id"),
                wake_at=_instant(e.get("wake_at")), output=e.get("output"),
                error=e.get("error"),
            )  # fmt: skip
            current = e.get("workflow_attempt", 1) >= workflow_attempt
            if rec.status == "failed" and current:
                self._failures[rec.position] = self._failures.get(rec.position, 0) + 1
            if not current:
                rec.final = False  # an earlier workflow attempt's failure: try again
            self._latest[rec.position] = rec

    @classmethod
    def parse(cls, text: str | None, workflow_attempt: int = 1) -> History:
        return cls(json.loads(text) if text else [], workflow_attempt)

    def at(self, position: int, name: str) -> Recorded | None:
        """What history holds at `position`, checked against the step name the code calls."""
        rec = self._latest.get(position)
        if rec is not None and rec.step != name:
            raise NonDeterminismError(position, rec.step, name)
        return rec

    def failures(self, position: int) -> int:
        return self._failures.get(position, 0)

    def next_attempt(self, position: int) -> int:
        rec = self._latest.get(position)
        return rec.attempt + 1 if rec is not None else 1

    def compensations_done(self) -> set[int]:
        """Positions whose compensation (recorded at -(p + 1)) has completed."""
        return {-pos - 1 for pos, rec in self._latest.items() if pos < 0 and rec.completed}

    def record(self, rec: Recorded) -> None:
        """Note an attempt recorded during this execution."""
        self._latest[rec.position] = rec
