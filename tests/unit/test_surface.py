"""The public surface is what was meant, and small pure pieces behave."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import durably
from durably import ConfigurationError, RetryPolicy, parse_duration
from durably.core.durations import parse_instant


def test_exported_names() -> None:
    assert sorted(durably.__all__) == sorted([
        "ChildWorkflowError", "ConfigurationError", "DatabaseUnavailable", "DeadlineExceeded",
        "Durably", "DurablyError", "Fence", "IdempotencyConflictError", "InvalidInput",
        "LeaseLostError", "NonDeterminismError", "NonRetryableError", "PayloadTooLarge",
        "RetryPolicy", "Run", "RunFailedError", "RunHandle", "RunNotFound", "RunTerminalError",
        "StepAttempt", "StepContext", "StepFailedError", "SyncDurably", "Worker", "Workflow",
        "WorkflowContext", "WorkflowNotFound", "WorkflowTimeoutError", "parse_duration",
        "ChildHandle", "StepLimitExceeded", "StepTimeout", "WorkflowMisuseError",
        "Queue",
        "SignalNotFound",
        "ContinueAsNew",
        "SyncChildHandle", "SyncStepApi", "SyncWorkflowContext",
        "Request", "RequestRejected",
        "Codec", "FernetCodec",
    ])  # fmt: skip
    for name in durably.__all__:
        assert getattr(durably, name).__doc__, f"{name} has no docstring"
    errors = [getattr(durably, n) for n in durably.__all__ if n.endswith(("Error", "Found"))]
    assert all(issubclass(e, durably.DurablyError) for e in errors if e is not
               durably.NonRetryableError)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3s", 3), ("500ms", 0.5), ("7 days", 604800), ("1h30m", 5400), ("2 minutes", 120),
     ("1.5", 1.5), (timedelta(seconds=4), 4), (10, 10)],
)  # fmt: skip
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "soon", "3 parsecs", "-1s", "5 s x"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_duration(bad)


def test_instants() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_instant("+5s", now) == now + timedelta(seconds=5)
    assert parse_instant("2026-12-01T10:00:00Z") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    with pytest.raises(ConfigurationError):
        parse_instant("tomorrow-ish")


def test_retry_policy_defaults_match_openworkflow() -> None:
    p = RetryPolicy()
    assert p.max_attempts == 10
    assert [p.delay(n).total_seconds() for n in (1, 2, 3, 8, 20)] == [1, 2, 4, 100, 100]


def test_testing_kit_exports() -> None:
    import durably.testing

    assert sorted(durably.testing.__all__) == [
        "Environment", "ReplayReport", "SkippingClock", "replay",
    ]  # fmt: skip
    for name in durably.testing.__all__:
        assert getattr(durably.testing, name).__doc__, f"{name} has no docstring"
