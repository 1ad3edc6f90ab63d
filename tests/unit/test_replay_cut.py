"""Which signal waits a workflow retry's cut drops (`cut_signal_waits`): each is given back
exactly once, at the retry whose cut drops it, whatever attempts and resumes came before."""

from __future__ import annotations

from typing import Any

from durably.store.history import cut_signal_waits


def _entry(
    position: int, kind: str, status: str, seq: int, workflow_attempt: int, attempt: int = 1
) -> dict[str, Any]:
    return {
        "position": position, "attempt": attempt, "step": f"s{position}", "kind": kind,
        "status": status, "final": status == "failed", "compensable": False, "seq": seq,
        "workflow_attempt": workflow_attempt,
    }  # fmt: skip


def _dropped(entries: list[dict[str, Any]], attempt: int, resumes: tuple[int, ...] = ()) -> Any:
    return [(r.position, r.attempt) for r in cut_signal_waits(entries, attempt, resumes)]


def test_the_waits_after_the_first_failure_are_dropped_in_log_order() -> None:
    history = [
        _entry(0, "signal-wait", "completed", 1, 1),  # before the cut: replayed
        _entry(1, "function", "failed", 2, 1),  # the cut
        _entry(3, "signal-wait", "completed", 3, 1),
        _entry(2, "signal-wait", "completed", 4, 1),
        _entry(4, "sleep", "completed", 5, 1),  # runs again; nothing to give back
    ]
    assert _dropped(history, 1) == [(3, 1), (2, 1)]


def test_an_attempt_without_a_failed_step_keeps_every_wait() -> None:
    history = [_entry(0, "signal-wait", "completed", 1, 1)]  # the workflow code raised
    assert _dropped(history, 1) == []


def test_a_wait_dropped_before_is_not_dropped_again() -> None:
    history = [
        _entry(0, "function", "failed", 1, 1),  # caught
        _entry(1, "signal-wait", "completed", 2, 1),  # given back by the first retry
        _entry(2, "function", "failed", 3, 1),
        _entry(0, "function", "failed", 4, 2, attempt=2),  # attempt 2 fails at once
    ]
    assert _dropped(history, 1) == [(1, 1)]
    assert _dropped(history, 2) == []


def test_the_wait_that_took_the_signal_again_gives_it_back_again() -> None:
    history = [
        _entry(0, "function", "failed", 1, 1),  # caught
        _entry(1, "signal-wait", "completed", 2, 1),  # given back by the first retry
        _entry(2, "function", "failed", 3, 1),
        _entry(0, "function", "failed", 4, 2, attempt=2),  # caught again
        _entry(1, "signal-wait", "completed", 5, 2, attempt=2),  # took it back
        _entry(2, "function", "failed", 6, 2, attempt=2),
    ]
    assert _dropped(history, 2) == [(1, 2)]


def test_a_wait_a_resume_kept_is_dropped_by_a_later_cut() -> None:
    history = [
        _entry(0, "function", "failed", 1, 1),  # caught
        _entry(1, "signal-wait", "completed", 2, 1),
        _entry(2, "function", "failed", 3, 1),  # the run failed; then `app.resume`
        _entry(2, "function", "failed", 4, 2, attempt=2),  # attempt 2 fails at once
    ]
    # The resume kept the wait (and the caught failure); the retry after attempt 2 cuts
    # at that failure, before the wait: its signal goes back.
    assert _dropped(history, 2, resumes=(2,)) == [(1, 1)]
