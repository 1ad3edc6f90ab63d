"""Retry policies (`core.retry`): the wait after each failed attempt."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durably import ConfigurationError, RetryPolicy
from durably.core.retry import STEP_DEFAULT, WORKFLOW_DEFAULT


def test_the_defaults_are_openworkflows() -> None:
    assert STEP_DEFAULT.max_attempts == 10
    assert [STEP_DEFAULT.delay(n).total_seconds() for n in (1, 2, 3, 7, 8, 50)] == [
        1, 2, 4, 64, 100, 100,
    ]  # fmt: skip
    assert WORKFLOW_DEFAULT.max_attempts == 1


@given(
    st.floats(min_value=0, max_value=1e6),
    st.floats(min_value=1, max_value=1e3),
    st.floats(min_value=0, max_value=1e7),
    st.integers(min_value=1, max_value=100_000),
)
def test_a_wait_never_shrinks_and_never_passes_the_maximum(
    first: float, coefficient: float, cap: float, attempt: int
) -> None:
    policy = RetryPolicy(5, first, coefficient, cap)
    now, after = policy.delay(attempt), policy.delay(attempt + 1)
    assert timedelta(0) <= now <= after <= timedelta(seconds=cap)
    assert policy.delay(1) == timedelta(seconds=min(first, cap))


@pytest.mark.parametrize("interval", ["soon", -1, "-3s", float("nan")])
def test_a_bad_interval_is_refused_where_the_policy_is_written(interval: object) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(initial_interval=interval)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        RetryPolicy(maximum_interval=interval)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": float("nan")},
        {"max_attempts": 0},
        {"max_attempts": 2.5},
        {"max_attempts": True},
        {"max_attempts": "3"},
        {"backoff_coefficient": float("nan")},
        {"backoff_coefficient": float("inf")},
        {"backoff_coefficient": 0.5},  # waits that shrink
        {"backoff_coefficient": "2"},
    ],
)
def test_bad_numbers_are_refused_where_the_policy_is_written(options: dict[str, object]) -> None:
    # OpenWorkflow's suite: they were taken, and failed later as an "unexpected error".
    with pytest.raises(ConfigurationError, match="RetryPolicy"):
        RetryPolicy(**options)  # type: ignore[arg-type]
