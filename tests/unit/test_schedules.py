"""Schedules and queue declarations as values: cron and time zones read by cronsim, bad
ones refused at declaration with nothing registered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durably import ConfigurationError, Durably, InvalidInput
from durably.workflow.queue import parse_rate
from durably.workflow.schedule import Schedule, tick_key


def test_next_ticks() -> None:
    at = datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)
    assert Schedule("*/5 * * * *").after(at) == datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert Schedule("* * * * * *").after(at) == datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC)
    # 09:00 in Paris is 08:00 UTC in winter.
    paris = Schedule("0 9 * * *", tz="Europe/Paris")
    assert paris.after(at) == datetime(2026, 1, 1, 8, tzinfo=UTC)
    assert tick_key("report", at) == "schedule:report:2026-01-01T00:00:03+00:00"


@pytest.mark.parametrize(
    ("cron", "tz"),
    [
        ("every minute", "UTC"),
        ("61 * * * *", "UTC"),
        ("* * * *", "UTC"),
        ("* * * * *", "Mars/Base"),
    ],
)
def test_bad_schedules_are_refused(cron: str, tz: str) -> None:
    app = Durably("sqlite:///:memory:")
    with pytest.raises(ConfigurationError):

        @app.workflow(name="x", schedule=cron, tz=tz)
        async def x(ctx: Any) -> None:
            return None

    assert app.workflows == {}


def test_a_scheduled_workflow_must_take_the_tick_as_input() -> None:
    app = Durably("sqlite:///:memory:")
    with pytest.raises(InvalidInput):

        @app.workflow(name="x", schedule="* * * * *")
        async def x(ctx: Any, n: int) -> None:
            return None

    assert app.schedules() == []

    @app.workflow(name="y", schedule="*/5 * * * *")
    async def y(ctx: Any, tick: dict[str, str]) -> None:
        return None

    (listed,) = app.schedules()
    assert listed["workflow"] == "y" and listed["schedule"] == "*/5 * * * *"
    assert datetime.fromisoformat(listed["next_at"]).minute % 5 == 0


@pytest.mark.parametrize("rate", ["10", "ten/1m", "0/1m", "3/0s", "3/-1s", "/1m", "3/1 parsec"])
def test_bad_rates(rate: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_rate(rate)


def test_due_ticks_are_the_newest_counted_back_from_now() -> None:
    every_5 = Schedule("*/5 * * * *")
    now = datetime(2026, 1, 1, 12, 3, tzinfo=UTC)
    assert every_5.due(None, now, 2) == [
        datetime(2026, 1, 1, 11, 55, tzinfo=UTC), datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
    ]  # fmt: skip
    assert every_5.due(datetime(2026, 1, 1, 11, 55, tzinfo=UTC), now, 10) == [
        datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    ]
    assert every_5.due(None, datetime(2026, 1, 1, 12, 0, tzinfo=UTC), 1) == [
        datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # a tick at `until` is due
    ]
    week_of_seconds = Schedule("* * * * * *").due(now - timedelta(days=7), now, 3)
    assert week_of_seconds == [now - timedelta(seconds=2), now - timedelta(seconds=1), now]
