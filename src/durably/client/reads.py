"""Where the client API's listing and inspection reads go: a streaming replica when the
app has one (`Durably(url, read_url=...)`, PostgreSQL only), the primary otherwise.

Only the reads an operator or a dashboard makes come here (`list_runs`, `get_run`,
`list_steps`, `list_events`, `list_signals`, `list_stuck`, `queue_counts`,
`list_streams`). Everything else reads the primary, on the store it was made with: the
worker (nothing here is on its path), waits that follow a run to its end (`RunHandle.wait`,
`get_event`, `read_stream`), reads in a transaction or under a lock, and reads that decide
a write (a cancel, a fork, a signal's target).

A replica lags the primary; what it shows must still not be wrong for this client:

- read-your-writes by a window: for `WRITE_WINDOW_S` after this client's own write (a
  start, a signal, a cancel, a resume, a fork, a purge) every read goes to the primary.
  Asking the servers instead (the primary's `pg_current_wal_lsn()` after each write, the
  replica's `pg_last_wal_replay_lsn()` before each read) costs a round trip on both
  paths, more than the primary read it would spare; the window costs a clock read.
- a run the replica does not know (`RunNotFound`; a run with no events) is read again
  from the primary: a run another client has just started is found.
- a replica that cannot serve (down, refused, no connection within 2 s) is left for
  `DOWN_S`, the reads go to the primary meanwhile, and that is logged once (and once
  more when it serves again).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..backends import connect_replica
from ..core.clock import Clock
from ..core.errors import DatabaseUnavailable, RunNotFound
from ..store.store import Store

T = TypeVar("T")
log = logging.getLogger("durably.replica")

WRITE_WINDOW_S = 5.0  # reads after this client's own write go to the primary this long
DOWN_S = 10.0  # a replica that failed is not asked again before this
_NEVER = float("-inf")


class Reads:
    """The app's inspection reads, routed to its replica or its primary (see the module)."""

    def __init__(
        self, primary: Store, clock: Clock, urls: tuple[str, str | None], pool_size: int
    ) -> None:
        """`urls`: the primary's and the replica's (None: no replica)."""
        self.primary = primary
        self.clock = clock
        self.replica: Store | None = None
        self._wrote_at = _NEVER
        self._down_until = _NEVER
        self._down = False  # logged as down, not yet as back
        url, read_url = urls
        if read_url:
            connector = connect_replica(url, read_url, primary.db.schema, pool_size)
            self.replica = Store(connector, primary.namespace, primary.codec)

    def wrote(self) -> None:
        """This client has written: its next reads, for a while, are the primary's."""
        self._wrote_at = self.clock.monotonic()

    def _target(self) -> Store | None:
        """The replica, if the next read may go there."""
        if self.replica is None:
            return None
        now = self.clock.monotonic()
        if now - self._wrote_at < WRITE_WINDOW_S or now < self._down_until:
            return None
        return self.replica

    async def read(
        self, fn: Callable[[Store], Awaitable[T]], unknown: Callable[[T], bool] | None = None
    ) -> T:
        """`fn` on the replica when it may serve it, else (or when the replica does not
        know the run: `RunNotFound`, or `unknown(result)`) on the primary."""
        replica = self._target()
        if replica is None:
            return await fn(self.primary)
        try:
            found = await fn(replica)
        except RunNotFound:
            return await fn(self.primary)
        except DatabaseUnavailable as exc:
            self._failed(exc)
            return await fn(self.primary)
        if self._down:
            self._down = False
            log.warning("the read replica serves again; inspection reads go to it")
        if unknown is not None and unknown(found):
            return await fn(self.primary)
        return found

    def _failed(self, exc: Exception) -> None:
        self._down_until = self.clock.monotonic() + DOWN_S
        if not self._down:
            self._down = True
            log.warning("the read replica cannot serve (%s); reading from the primary, "
                        "trying the replica again every %gs", exc, DOWN_S)  # fmt: skip

    async def close(self) -> None:
        if self.replica is not None:
            await self.replica.db.close()


def empty(found: Any) -> bool:
    """Nothing found: maybe a run the replica does not know yet."""
    return not found
