"""Durations and instants as users write them: `timedelta`, "3s", "7 days", "1h30m", ISO."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from ._errors import ConfigurationError

_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")

Duration = timedelta | str | int | float


def parse_duration(value: Duration) -> timedelta:
    """Turn `timedelta`, seconds, or text like "3s", "7 days", "1h30m" into a timedelta.

    Raises:
        ConfigurationError: the text is not a duration.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value)
    else:
        raise ConfigurationError(f"not a duration: {value!r}")
    if seconds < 0:
        raise ConfigurationError(f"a duration cannot be negative: {value!r}")
    return timedelta(seconds=seconds)


def _parse_text(text: str) -> float:
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m or m.group(2) not in _UNITS:
            raise ConfigurationError(
                f"not a duration: {text!r} (write e.g. '3s', '500ms', '7 days', '1h30m')"
            )
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not s:
        raise ConfigurationError("not a duration: empty text")
    return total


def parse_instant(value: datetime | str, now: datetime | None = None) -> datetime:
    """An absolute time: an aware datetime, ISO text, or "+5s" (relative to now)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = value.strip()
    if text.startswith("+"):
        return (now or datetime.now(UTC)) + parse_duration(text[1:])
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(
            f"not a time: {value!r} (use ISO 8601 like 2026-12-01T10:00:00Z, or +5s)"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
