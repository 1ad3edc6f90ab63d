"""Retention (`Durably(retention="30 days")`): workers purge finished runs periodically.

Each worker tries, every interval, to take its namespace's "retention" row of the
maintenance table (free, or its holder's time is up); the one that takes it purges, and
nobody else does for one interval. A purge deletes the runs of its app's namespace only, so
each namespace has a row of its own: a worker of one never holds another's purge back. The
purge itself goes in short batches, so running workers are not held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..core.errors import DatabaseUnavailable
from ..store.models import TERMINAL
from ..store.operations import Operations
from .host import Host

log = logging.getLogger("durably.worker")
JOB = "retention"


def interval(keep_s: float) -> float:
    """How often a purge runs: a quarter of the retention, between 1 s and 1 h."""
    return min(max(keep_s / 4, 1.0), 3600.0)


def start(app: Host, worker_id: str, stopping: asyncio.Event) -> asyncio.Task[None] | None:
    """A worker's retention task, if the app keeps finished runs for a limited time."""
    if app.retention is None:
        return None
    keep_s = app.retention.total_seconds()
    return asyncio.create_task(_loop(app, worker_id, keep_s, stopping), name="durably-retention")


async def _loop(app: Host, worker_id: str, keep_s: float, stopping: asyncio.Event) -> None:
    every = interval(keep_s)
    ops = Operations(app.store)
    job = f"{JOB}:{app.namespace}"
    while not stopping.is_set():
        try:
            if await ops.take_maintenance(job, worker_id, every):
                done = await ops.purge(keep_s, sorted(TERMINAL))
                if done["runs"] or done["signals"]:
                    log.info("retention: purged %d runs and %d signals finished over %gs ago",
                             done["runs"], done["signals"], keep_s)  # fmt: skip
        except DatabaseUnavailable as exc:
            log.warning("retention: %s; trying again in %gs", exc, every)
        except Exception:  # housekeeping must never take the worker down
            log.exception("retention: the purge failed; trying again in %gs", every)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), every)
