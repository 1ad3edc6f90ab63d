"""The worker's memory of cancels notified before their run's claim returned: kept one
lease, bounded, each answered once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from durably.worker.early import MAX_KEPT, EarlyCancels


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.floats(0, 100)), max_size=30),
       st.sampled_from("abcdef"), st.floats(0, 200))  # fmt: skip
def test_a_claim_finds_a_cancel_of_the_last_lease_once(
    notes: list[tuple[str, float]], claimed: str, at: float
) -> None:
    early = EarlyCancels(keep_s=10.0)
    now = 0.0
    last: dict[str, float] = {}
    for run_id, step in notes:
        now += step
        early.remember(run_id, now)
        last[run_id] = now
    at += now
    expected = claimed in last and last[claimed] + 10.0 > at
    assert early.claimed(claimed, at) is expected
    assert early.claimed(claimed, at) is False  # answered once


def test_kept_notes_are_bounded() -> None:
    early = EarlyCancels(keep_s=10.0)
    for i in range(MAX_KEPT + 100):
        early.remember(f"r{i}", 1.0)
    assert not early.claimed("r0", 1.0)  # the oldest went first
    assert early.claimed(f"r{MAX_KEPT + 99}", 1.0)
    assert len(early._until) <= MAX_KEPT
