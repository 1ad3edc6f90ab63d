"""Durations and instants: anything a user can write either parses or is refused with
`InvalidInput`; no `OverflowError` (or any other exception) escapes, and what parses can
be added to now and subtracted from it."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from durably import ConfigurationError, InvalidInput, RetryPolicy, parse_duration
from durably.core.durations import MAX_DURATION, parse_instant, seconds_of

NOW = datetime(2026, 12, 2, tzinfo=UTC)
UNITS = ["ms", "s", "sec", "m", "min", "h", "hours", "d", "days", "w", "weeks", "parsecs", ""]


def _usable(duration: timedelta) -> None:
    assert timedelta(0) <= duration <= MAX_DURATION
    assert parse_duration(duration) == duration  # a timedelta is taken as it is
    assert NOW + duration >= NOW - duration  # no overflow either way


@pytest.mark.parametrize(
    "text", ["99999999999d", "9999999999d", "52200 weeks", "365251d", "9" * 400, "9" * 400 + "s"]
)
def test_oversized_durations_are_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput, match="longer than 1000 years"):
        parse_duration(text)
    with pytest.raises(ConfigurationError):  # what a bad duration raised before
        parse_duration(text)


@pytest.mark.parametrize("number", [10**400, -(10**400), math.inf, -math.inf, math.nan, 1e300])
def test_oversized_numbers_are_invalid_input(number: float) -> None:
    with pytest.raises(InvalidInput):
        parse_duration(number)


def test_the_longest_duration_is_usable() -> None:
    _usable(parse_duration("365250d"))
    _usable(parse_duration(MAX_DURATION))
    with pytest.raises(InvalidInput):
        parse_duration(MAX_DURATION + timedelta(microseconds=1))


def test_a_duration_names_what_it_was_for() -> None:
    with pytest.raises(InvalidInput, match="step 'nap': a duration cannot be longer"):
        seconds_of("9999999999d", "step 'nap'")


@pytest.mark.parametrize(
    "text", ["+99999999999d", "+9999999999d", "9999-12-31T23:59:59-05:00", "0001-01-01T00:00+05:00"]
)
def test_oversized_instants_are_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_instant(text, NOW)


def test_a_retry_policy_is_checked_where_it_is_written() -> None:
    with pytest.raises(InvalidInput):
        RetryPolicy(initial_interval="99999999999d")
    # float's pow overflows long after the cap is reached: the cap, not OverflowError
    assert RetryPolicy(max_attempts=5000).delay(4000) == timedelta(seconds=100)


@given(st.text())
def test_any_text_parses_or_is_invalid_input(text: str) -> None:
    _parses_or_refused(text)


@given(
    st.lists(
        st.tuples(
            st.one_of(st.integers(0, 10**30).map(str), st.floats(0, 1e30).map(repr)),
            st.sampled_from(UNITS),
            st.sampled_from(["", " "]),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_sum_of_parts_parses_or_is_invalid_input(parts: list[tuple[str, str, str]]) -> None:
    _parses_or_refused("".join(f"{n}{space}{unit}" for n, unit, space in parts))


@given(st.one_of(st.integers(), st.floats(), st.timedeltas()))
@example(1e-05)  # its seconds print as "1e-05" (CI found it)
def test_any_number_or_timedelta_parses_or_is_invalid_input(value: float | timedelta) -> None:
    _parses_or_refused(value)


@given(st.text())
def test_any_instant_text_parses_or_is_invalid_input(text: str) -> None:
    try:
        when = parse_instant(text, NOW)
    except InvalidInput:
        return
    assert when.tzinfo is not None
    assert when.astimezone(UTC).timestamp() == when.timestamp()


def _parses_or_refused(value: str | float | timedelta) -> None:
    try:
        duration = parse_duration(value)
    except InvalidInput:
        return
    _usable(duration)
    assert parse_duration(f"{duration.total_seconds():f}") == timedelta(  # 1e-05: no exponents
        seconds=duration.total_seconds()
    )
