"""Retry policies for steps and workflows (defaults as OpenWorkflow's)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .durations import Duration, parse_duration


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how fast a failed step (or workflow) is tried again.

    Args:
        max_attempts: attempts in all, the first included; 1 means no retry.
        initial_interval: the wait before the second attempt.
        backoff_coefficient: each further wait is the previous one times this.
        maximum_interval: the longest wait.

    Example:
        `RetryPolicy(max_attempts=5, initial_interval="2s")`
    """

    max_attempts: int = 10
    initial_interval: Duration = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: Duration = timedelta(seconds=100)

    def __post_init__(self) -> None:
        # Refused where the policy is written, not at a failed attempt deep in the engine.
        parse_duration(self.initial_interval)
        parse_duration(self.maximum_interval)

    def delay(self, attempt: int) -> timedelta:
        """The wait after failed attempt number `attempt` (1-based)."""
        first = parse_duration(self.initial_interval).total_seconds()
        cap = parse_duration(self.maximum_interval).total_seconds()
        try:
            grown = first * self.backoff_coefficient ** (attempt - 1)
        except OverflowError:  # float's pow raises past 1e308; the cap is long reached
            grown = cap
        return timedelta(seconds=min(cap, grown))


STEP_DEFAULT = RetryPolicy()
WORKFLOW_DEFAULT = RetryPolicy(max_attempts=1)
