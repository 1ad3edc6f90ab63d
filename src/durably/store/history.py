"""A run's recorded history: the ordered log of results, and what each position holds.

Workflow code issues steps in an order that deterministic code repeats exactly, so a step
is identified by its position (the n-th step the code issued) and checked by name and kind:
anything else where history has a step is a `NonDeterminismError`, never a silent re-run.

The results a workflow saw form one log, ordered by `seq` (the order in which they were
recorded, which is the order the code received them). Replay hands them back in that
order, one at a time, so concurrent branches see exactly what they saw the first time.
Only the worker holding the run's lease appends to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..core.errors import NonDeterminismError


def _instant(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return datetime.fromisoformat(value)


@dataclass
class Recorded:
    """One recorded step attempt."""

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
    seq: int | None = None
    delivered: bool = False
    workflow_attempt: int = 1

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def resolves(self) -> bool:
        """The step's outcome as the workflow received it: an entry of the log."""
        return self.seq is not None and (self.completed or (self.status == "failed" and self.final))

    @property
    def waiting(self) -> bool:
        """A sleep, signal wait or child wait that has not ended yet."""
        return self.status == "running" and self.kind in ("sleep", "signal-wait", "child")

    def describe(self) -> str:
        return f"{self.kind} step {self.step!r}"

    @classmethod
    def from_entry(cls, e: dict[str, Any]) -> Recorded:
        return cls(
            position=e["position"], attempt=e["attempt"], step=e["step"], kind=e["kind"],
            status=e["status"], final=bool(e["final"]), compensable=bool(e["compensable"]),
            signal=e.get("signal"), child_run_id=e.get("child_run_id"),
            wake_at=_instant(e.get("wake_at")), output=e.get("output"), error=e.get("error"),
            seq=e.get("seq"), delivered=bool(e.get("delivered")),
            workflow_attempt=e.get("workflow_attempt", 1),
        )  # fmt: skip


class History:
    """What one claim starts from: the view of the run's history its workflow attempt has.

    Each workflow attempt starts from the view the attempt before it ended with (the records
    it replayed plus those it recorded; at each position the latest attempt wins), cut by
    how it began:
    - a workflow retry keeps the completed results up to the first step that failed for good,
      in log order; everything after it may have depended on that failure, so those steps
      run again (with a fresh retry budget) if the code calls them; a signal a wait among
      them took goes back to the run's buffer for them (`cut_signal_waits`);
    - a resume (`app.resume`, listed in the run's `resumes`) keeps everything the workflow
      received: every completed result, and the failures too, as *tentative* ones. Replay
      hands a tentative failure back only where the code needs it to reach a completed step
      (a completed record at a position issued after the failure was received: the code
      caught it and went on); otherwise it is skipped and the step runs again with a fresh
      budget (`skips`). Completed compensations stay done.
    The current attempt's own records all count.
    """

    def __init__(
        self, entries: list[dict[str, Any]], workflow_attempt: int = 1,
        resumes: Iterable[int] = (),
    ) -> None:  # fmt: skip
        rows = [Recorded.from_entry(e) for e in entries]
        self.attempts = len(rows)
        self.max_seq = max((r.seq or 0 for r in rows), default=0)
        self._last_attempt: dict[int, int] = {}
        self._children: dict[int, tuple[int, str]] = {}
        for r in rows:
            self._last_attempt[r.position] = max(r.attempt, self._last_attempt.get(r.position, 0))
            if r.child_run_id and r.attempt >= self._children.get(r.position, (0, ""))[0]:
                self._children[r.position] = (r.attempt, r.child_run_id)
        self._attempt = workflow_attempt
        view = _view(rows, workflow_attempt, set(resumes))
        self._latest: dict[int, Recorded] = dict(view)
        self._failures: dict[int, int] = {}
        own = [r for r in rows if r.workflow_attempt >= workflow_attempt]
        for r in sorted(own, key=lambda r: (r.position, r.attempt)):
            if r.status == "failed":
                self._failures[r.position] = self._failures.get(r.position, 0) + 1
            self._latest[r.position] = r
        for pos in [p for p, r in self._latest.items() if p < 0]:
            undone = self._latest.get(-pos - 1)  # a compensation holds while its step does
            if undone is None or undone.workflow_attempt > self._latest[pos].workflow_attempt:
                del self._latest[pos]
        self.log = sorted(
            (r for r in self._latest.values() if r.position >= 0 and r.resolves),
            key=lambda r: r.seq or 0,
        )
        self._kept = [r.position for r in view.values() if r.completed and r.position > 0]

    def tentative(self, rec: Recorded) -> bool:
        """Whether `rec` is a failure a resume gave a fresh budget unless the code needs it."""
        return (
            rec.status == "failed"
            and rec.workflow_attempt < self._attempt
            and self._latest.get(rec.position) is rec
        )

    def skips(self, rec: Recorded, issued: int) -> bool:
        """Whether replay skips tentative failure `rec`, the code having issued `issued`
        steps so far: no completed step of the view was issued after it was received."""
        return self.tentative(rec) and all(p <= issued for p in self._kept)

    def forget(self, position: int) -> None:
        """A skipped tentative failure: its step runs again, with a fresh budget."""
        self._latest.pop(position, None)

    @classmethod
    def parse(
        cls, text: str | None, workflow_attempt: int = 1, resumes: str | list[int] | None = None
    ) -> History:
        began: list[int] = json.loads(resumes) if isinstance(resumes, str) else resumes or []
        return cls(json.loads(text) if text else [], workflow_attempt, began)

    def at(self, position: int, name: str, kind: str) -> Recorded | None:
        """What history holds at `position`, checked against the step the code issues."""
        rec = self._latest.get(position)
        if rec is not None and (rec.step != name or rec.kind != kind):
            raise NonDeterminismError(position, rec.describe(), f"{kind} step {name!r}")
        return rec

    def recorded_at(self, position: int) -> Recorded | None:
        """What history holds at `position`, unchecked."""
        return self._latest.get(position)

    def reaches(self, position: int) -> bool:
        """Whether history holds anything at `position` or after it."""
        return any(p >= position for p in self._latest)

    def failures(self, position: int) -> int:
        return self._failures.get(position, 0)

    def child_at(self, position: int) -> str | None:
        """The child the latest attempt at `position` started, whatever the workflow
        attempt (one a retry's cut or a resume dropped from the view included)."""
        found = self._children.get(position)
        return found[1] if found else None

    def next_attempt(self, position: int) -> int:
        return self._last_attempt.get(position, 0) + 1

    def took_attempt(self, position: int, attempt: int) -> None:
        self._last_attempt[position] = max(attempt, self._last_attempt.get(position, 0))

    def failed(self, position: int) -> None:
        self._failures[position] = self._failures.get(position, 0) + 1

    def undos_left(self) -> bool:
        """Whether a completed step has an undo (`compensate=`) not yet run."""
        done = self.compensations_done()
        return any(rec.completed and rec.compensable and pos not in done
                   for pos, rec in self._latest.items() if pos > 0)  # fmt: skip

    def compensations_done(self) -> set[int]:
        """Positions whose compensation (recorded at -(p + 1)) has completed."""
        return {-pos - 1 for pos, rec in self._latest.items() if pos < 0 and rec.completed}


def cut_signal_waits(
    entries: list[dict[str, Any]], workflow_attempt: int, resumes: Iterable[int]
) -> list[Recorded]:
    """The completed signal waits that workflow attempt `workflow_attempt` ended with and a
    workflow retry's cut drops, in log order: each took a signal the next attempt does not
    replay, so its wait would wait for that signal again (see `RunEnds.retry_run`)."""
    rows = [Recorded.from_entry(e) for e in entries]
    ended = _ended_with(_view(rows, workflow_attempt, set(resumes)), rows, workflow_attempt)
    kept = _cut(ended)
    dropped = (r for p, r in ended.items() if p not in kept and p >= 0)
    return sorted(
        (r for r in dropped if r.kind == "signal-wait" and r.completed and r.resolves),
        key=lambda r: r.seq or 0,
    )


def _view(rows: list[Recorded], workflow_attempt: int, resumes: set[int]) -> dict[int, Recorded]:
    """The records attempt `workflow_attempt` starts from, by position (see `History`)."""
    view: dict[int, Recorded] = {}
    for k in range(1, workflow_attempt):
        ended = _ended_with(view, rows, k)
        if k + 1 in resumes:
            view = {p: r for p, r in ended.items()
                    if r.resolves or (p < 0 and r.completed)}  # fmt: skip
        else:
            view = _cut(ended)
    return view


def _ended_with(view: dict[int, Recorded], rows: list[Recorded], k: int) -> dict[int, Recorded]:
    """What attempt `k` ended with, by position: the `view` it started from and its own
    records (at each position the latest attempt wins)."""
    ended = dict(view)
    for r in sorted((r for r in rows if r.workflow_attempt == k),
                    key=lambda r: (r.position, r.attempt)):  # fmt: skip
        ended[r.position] = r
    return ended


def _cut(ended: dict[int, Recorded]) -> dict[int, Recorded]:
    """What a workflow retry keeps of what an attempt `ended` with: the completed results
    before the first step that failed for good, in log order, and the completed undos of
    those (a `compensate()` undid them: they are not undone again)."""
    failed = [r.seq or 0 for p, r in ended.items() if p >= 0 and r.resolves and not r.completed]
    cut = min(failed, default=None)
    kept = {p: r for p, r in ended.items() if p >= 0 and r.resolves and r.completed
            and (cut is None or (r.seq or 0) < cut)}  # fmt: skip
    undone = {p: r for p, r in ended.items() if p < 0 and r.completed and -p - 1 in kept}
    return kept | undone
