"""The one clock the engine reads on the Python side; tests may replace it.

PostgreSQL runs use the database's own clock for every stored time; SQLite runs, being
embedded, use this one (registered as the SQL function `now()`). `durably.testing` skips
time on both: a clock with an offset, and on PostgreSQL a `now()` of its own that adds
the same offset (see `durably/testing/_clock.py`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Clock:
    """Wall time for stored instants, monotonic time for measuring intervals."""

    @contextlib.contextmanager
    def awaiting_result(self) -> Iterator[None]:
        """Held while a caller waits for a run to end (`RunHandle.wait`). A test clock
        that skips time (`durably.testing`) skips it only then; this one ignores it."""
        yield

    def time(self) -> float:
        """Seconds since the Unix epoch."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        return time.monotonic()
