"""Retry policies for steps and workflows (defaults as OpenWorkflow's)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from .durations import Duration, parse_duration
from .errors import ConfigurationError


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
        attempts, coefficient = self.max_attempts, self.backoff_coefficient
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy: max_attempts must be a whole number ≥ 1 (1: no retry), "
                f"not {attempts!r}"
            )
        if (
            isinstance(coefficient, bool)
            or not isinstance(coefficient, int | float)
            or not math.isfinite(coefficient)
            or coefficient < 1
        ):
            raise ConfigurationError(
                f"RetryPolicy: backoff_coefficient must be a finite number ≥ 1 (1: equal "
                f"waits), not {coefficient!r}"
            )
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
