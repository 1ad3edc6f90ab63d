"""Schedules: workflows started by cron (SPEC §4.17), parsed by `cronsim`.

Every worker that registers a scheduled workflow starts its runs, each tick once: the run
of a tick has the idempotency key `schedule:<name>:<tick>`, so workers that start it at
once (or a worker restarted within the tick) find the one run that exists. A worker
starts at the first tick after it comes up: ticks missed while no worker ran are skipped,
unless `backfill=True`, which starts those after the last tick recorded (`schedules`
table), the newest `MAX_BACKFILL` of them. A worker that wakes late (stopped, its loop
blocked, the machine asleep) does the same: the newest missed tick, or with backfill the
newest `MAX_BACKFILL`, never one run for each tick missed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from datetime import UTC, datetime
from typing import Any

from ..core.errors import DatabaseUnavailable
from ..store.ticks import Ticks
from ..workflow.definition import Definition
from ..workflow.schedule import tick_key
from .host import Host

log = logging.getLogger("durably.schedules")
MAX_BACKFILL = 1000


class Scheduler:
    """Starts the runs of the app's scheduled workflows, tick by tick, until cancelled."""

    def __init__(self, app: Host, workflows: list[Definition[Any, Any]]) -> None:
        self.app = app
        self.workflows = workflows

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.app.clock.time(), UTC)

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("schedules: stopped by an unexpected error; no more scheduled runs")
            raise

    async def _run(self) -> None:
        pending: dict[Definition[Any, Any], collections.deque[datetime]] = {}
        for wf in self.workflows:
            pending[wf] = await self._retrying(self._first_ticks, wf)
        while True:
            now = self._now()
            for wf, ticks in pending.items():
                if ticks[0] <= now:
                    for tick in self._due(wf, ticks, now):
                        await self._retrying(self._fire, wf, tick)
                    assert wf.schedule is not None
                    pending[wf] = collections.deque([wf.schedule.after(now)])
            wait = min(t[0] for t in pending.values()) - self._now()
            await asyncio.sleep(max(wait.total_seconds(), 0.001))

    def _due(
        self, wf: Definition[Any, Any], ticks: collections.deque[datetime], now: datetime
    ) -> list[datetime]:
        """The ticks to start now. Woken late (a stopped or blocked worker, a machine that
        slept), a schedule without backfill starts only the newest tick it missed, one
        with backfill the newest MAX_BACKFILL: never one run for each tick missed."""
        assert wf.schedule is not None
        if not wf.schedule.backfill:
            return wf.schedule.due(None, now, 1)
        later = wf.schedule.due(ticks[-1], now, MAX_BACKFILL)  # after the last one known
        return ([t for t in ticks if t <= now] + later)[-MAX_BACKFILL:]

    async def _retrying(self, fn: Any, *args: Any) -> Any:
        delay = 0.1
        while True:
            try:
                return await fn(*args)
            except DatabaseUnavailable as exc:
                log.warning("schedules: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _first_ticks(self, wf: Definition[Any, Any]) -> collections.deque[datetime]:
        """The ticks to start first: the next one, or (backfill) every one since the
        last recorded, up to now, and the next."""
        assert wf.schedule is not None
        now = self._now()
        ticks: collections.deque[datetime] = collections.deque()
        if wf.schedule.backfill:
            await self.app.open()
            last = await Ticks(self.app.store).last(wf.name)
            if last is not None:
                ticks.extend(wf.schedule.due(last, now, MAX_BACKFILL))
        next_tick = wf.schedule.after(now)
        if not ticks or ticks[-1] < next_tick:
            ticks.append(next_tick)
        return collections.deque(ticks)

    async def _fire(self, wf: Definition[Any, Any], tick: datetime) -> None:
        assert wf.schedule is not None
        at = tick.astimezone(UTC).isoformat()
        try:
            new = wf.new_run(
                {"scheduled_at": at} if wf.takes_input else None,
                max_payload=self.app.max_payload, codec=self.app.codec,
                idempotency_key=tick_key(wf.name, tick),
            )  # fmt: skip
            run, _ = await self.app.create_run(new)
        except DatabaseUnavailable:
            raise
        except Exception:
            log.exception("schedule of %s: could not start the run of %s", wf.name, at)
            return
        await Ticks(self.app.store).ticked(wf.name, wf.schedule.cron, wf.schedule.tz, tick)
        log.debug("schedule of %s: run %s for %s", wf.name, run.run_id, at)


def next_ticks(app: Host) -> list[dict[str, Any]]:
    """`[{"workflow", "version", "schedule", "tz", "backfill", "next_at"}]` of the app's
    scheduled workflows, by the clock now."""
    now = datetime.fromtimestamp(app.clock.time(), UTC)
    out = []
    for wf in app.workflows.values():
        if wf.schedule is not None:
            out.append({"workflow": wf.name, "version": wf.version, **wf.schedule.to_dict(),
                        "next_at": wf.schedule.after(now).isoformat()})  # fmt: skip
    return out
