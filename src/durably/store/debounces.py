"""Debounced starts (SPEC §4.23): starts with one debounce key inside a window name one run.

A window is a run of the key that is pending and was never claimed (fence 0). Migration
0025 holds at most one such run per (namespace, workflow, key) in a unique partial index,
and `debounce_run` inserts against it: the first start of a window inserts the run, each
later one updates it (the latest input and options, the start pushed back). Which start
opens the window and which join it is the database's decision, taken under the index's
lock, so it holds across processes and machines; no process remembers a window. A claim
takes the run out of the index in its own write (fence + 1): the next start opens a new
window, whatever worker release claimed it.
"""

from __future__ import annotations

from typing import Any

from ..backends import Connector
from .models import Run
from .records import Debounce


class Debounces:
    """The debounced start, over the store's connector."""

    def __init__(self, connector: Connector) -> None:
        self.db = connector

    async def start(
        self, params: dict[str, Any], debounce: Debounce, external: Any = None
    ) -> tuple[Run, bool]:
        """Open a window with the run `params` describe, or join the open one; (the run,
        whether this start opened the window). `external`: the caller's transaction."""
        query = dict(
            params, debounce_key=debounce.key, debounce_s=debounce.delay_s,
            debounce_max_s=debounce.max_s,
        )  # fmt: skip
        if external is None:
            rows = await self.db.fetch("debounce_run", **query)
        else:
            async with self.db.transaction(external) as tx:
                rows = await tx.fetch("debounce_run", **query)
        run = Run.from_row(rows[0])
        return run, run.run_id == params["id"]
