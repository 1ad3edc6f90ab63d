"""The one clock the engine reads on the Python side; tests may replace it.

PostgreSQL runs use the database's own clock for every stored time; SQLite runs, being
embedded, use this one (registered as the SQL function `now()`).
"""

from __future__ import annotations

import time


class Clock:
    """Wall time for stored instants, monotonic time for measuring intervals."""

    def time(self) -> float:
        """Seconds since the Unix epoch."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        return time.monotonic()
