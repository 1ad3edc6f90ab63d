"""Durations and instants as users write them: `timedelta`, "3s", "7 days", "1h30m", ISO.

A duration is at most `MAX_DURATION` (1000 years): any instant it leads to from now, or
back from now, stays inside what `datetime` and both databases hold, so no later
arithmetic on it can overflow. Anything else is refused here with `InvalidDuration`
(an `InvalidInput`), never an `OverflowError` from deep inside the engine.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from .errors import InvalidDuration, InvalidInput

_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")
MAX_DURATION = timedelta(days=365_250)
# Instants outside these years are refused: the UTC offset of an aware datetime, or a
# duration of MAX_DURATION on either side, would otherwise overflow `datetime`.
_YEARS = range(1000, 9000)

Duration = timedelta | str | int | float


def parse_duration(value: Duration) -> timedelta:
    """Turn `timedelta`, seconds, or text like "3s", "7 days", "1h30m" into a timedelta.

    Raises:
        InvalidDuration: not a duration, negative, or longer than 1000 years (it is both
            a `ConfigurationError` and an `InvalidInput`).
    """
    if isinstance(value, timedelta):
        duration = value  # as is: total_seconds() loses microseconds past 2**53 of them
    elif isinstance(value, int | float) and not isinstance(value, bool):
        duration = _from_seconds(value, value)
    elif isinstance(value, str):
        duration = _from_seconds(_parse_text(value), value)
    else:
        raise InvalidDuration(f"not a duration: {value!r}")
    if duration < timedelta(0):
        raise InvalidDuration(f"a duration cannot be negative: {value!r}")
    if duration > MAX_DURATION:
        raise InvalidDuration(f"a duration cannot be longer than 1000 years: {value!r}")
    return duration


def seconds_of(value: Duration, what: str) -> float:
    """`value` in seconds, for workflow code: a bad one is an `InvalidInput` naming `what`
    it was for (a step, a wait), the failure its run records."""
    try:
        return parse_duration(value).total_seconds()
    except InvalidDuration as exc:
        raise InvalidInput(f"{what}: {exc}") from None


def _from_seconds(seconds: float, value: Duration) -> timedelta:
    # A float holds any count of seconds up to 1e308 (inf beyond), timedelta only up to
    # 8.6e13: compare before converting.
    try:
        number = float(seconds)
    except OverflowError:  # an int past a float's range
        number = math.inf if seconds > 0 else -math.inf
    if math.isnan(number):
        raise InvalidDuration(f"not a duration: {value!r}")
    if abs(number) > MAX_DURATION.total_seconds():
        sign = "negative" if number < 0 else "longer than 1000 years"
        raise InvalidDuration(f"a duration cannot be {sign}: {value!r}")
    return timedelta(seconds=number)


def _parse_text(text: str) -> float:
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m or m.group(2) not in _UNITS:
            raise InvalidDuration(
                f"not a duration: {text!r} (write e.g. '3s', '500ms', '7 days', '1h30m')"
            )
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not s:
        raise InvalidDuration("not a duration: empty text")
    return total


def parse_instant(value: datetime | str, now: datetime | None = None) -> datetime:
    """An absolute time: an aware datetime, ISO text, or "+5s" (relative to now).

    Raises:
        InvalidDuration: not a time, or a year outside 1-8999.
    """
    if isinstance(value, datetime):
        parsed = value
    elif (text := value.strip()).startswith("+"):
        parsed = (now or datetime.now(UTC)) + parse_duration(text[1:])
    else:
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidDuration(
                f"not a time: {value!r} (use ISO 8601 like 2026-12-01T10:00:00Z, or +5s)"
            ) from None
    if parsed.year not in _YEARS:
        raise InvalidDuration(f"a time must be in the years 1000-8999, not {value!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
