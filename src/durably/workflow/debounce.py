"""A start's debounce options (SPEC §4.23), checked before anything is written."""

from __future__ import annotations

from datetime import datetime

from ..core.durations import Duration, seconds_of
from ..core.errors import InvalidInput
from ..store.records import Debounce


def debounce_of(
    debounce: Duration | None,
    key: str | None,
    most: Duration | None,
    *,
    idempotency_key: str | None = None,
    available_at: datetime | str | None = None,
) -> Debounce | None:
    """The window `start(debounce=, debounce_key=, debounce_max=)` asks for (None: a plain
    start). InvalidInput for options that do not make one.

    `idempotency_key` is refused with it: a debounced start returns the run of its window,
    whose input the latest start replaces, which an idempotent start must never do; and
    `available_at`, since the window decides when the run starts."""
    if debounce is None:
        if key is not None or most is not None:
            given = "debounce_key" if key is not None else "debounce_max"
            raise InvalidInput(f"{given} needs debounce= (how long to wait for a later start)")
        return None
    delay = seconds_of(debounce, "debounce")
    if delay <= 0:
        raise InvalidInput(f"debounce must be a positive duration, not {debounce!r}")
    if not isinstance(key, str) or not key:
        raise InvalidInput(
            f"debounce needs a debounce_key (a non-empty string: starts with one key share "
            f"a window), not {key!r}"
        )
    cap = seconds_of(most, "debounce_max") if most is not None else None
    if cap is not None and cap < delay:
        raise InvalidInput(
            f"debounce_max ({most!r}) must be at least debounce ({debounce!r}): the run "
            "starts at most debounce_max after the first start of its window"
        )
    if idempotency_key is not None:
        raise InvalidInput(
            "a start takes debounce or idempotency_key, not both: a debounced start joins "
            "the pending run of its window and replaces its input"
        )
    if available_at is not None:
        raise InvalidInput(
            "a debounced start takes no available_at: the run starts `debounce` after the "
            "latest start of its window (at most debounce_max after the first)"
        )
    return Debounce(key, delay, cap)
