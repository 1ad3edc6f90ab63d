"""The run's history as an execution reads it (`store.history`): matched by position,
name and kind."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durably import NonDeterminismError
from durably.store.history import History


def _entry(position: int, step: str, kind: str, status: str, seq: int, **extra: Any) -> Any:
    return {
        "position": position, "attempt": 1, "step": step, "kind": kind, "status": status,
        "final": status != "running", "compensable": False, "seq": seq, "workflow_attempt": 1,
        **extra,
    }  # fmt: skip


def test_a_step_is_matched_by_position_name_and_kind() -> None:
    history = History.parse(json.dumps([
        _entry(1, "fetch", "function", "completed", 1, output=3),
        _entry(2, "nap", "sleep", "completed", 2),
    ]))  # fmt: skip
    rec = history.at(1, "fetch", "function")
    assert rec is not None and rec.completed and rec.output == 3
    assert [r.position for r in history.log] == [1, 2]
    assert history.at(3, "new", "function") is None  # beyond it: a new step
    assert history.reaches(2) and not history.reaches(3)
    with pytest.raises(NonDeterminismError, match="position 1"):
        history.at(1, "fetch-v2", "function")  # renamed
    with pytest.raises(NonDeterminismError):
        history.at(2, "nap", "signal-wait")  # another kind


def test_attempts_count_from_what_history_holds() -> None:
    history = History.parse(json.dumps([
        _entry(1, "flaky", "function", "failed", 1, final=False),
    ]))  # fmt: skip
    assert history.next_attempt(1) == 2
    assert history.next_attempt(2) == 1
