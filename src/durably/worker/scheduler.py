"""Schedules: workflows started by cron (SPEC §4.17), parsed by `cronsim`.

Every worker that registers a scheduled workflow starts its runs, each tick once: the run
of a tick has the idempotency key `schedule:<name>:<tick>`, so workers that start it at
once (or a worker restarted within the tick) find the one run that exists. A worker
starts at the first tick after it comes up: ticks missed while no worker ran are skipped,
unless `backfill=True`, which starts those after the last tick recorded (`schedules`
table), at most `MAX_BACKFILL` of them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..core.errors import ConfigurationError, DatabaseUnavailable

if TYPE_CHECKING:
    from ..client.app import Durably
    from ..workflow.definition import Workflow

log = logging.getLogger("durably.schedules")
MAX_BACKFILL = 1000


@dataclass(frozen=True)
class Schedule:
    """A cron expression (5 fields, or 6 with seconds first) read in time zone `tz`."""

    cron: str
    tz: str = "UTC"
    backfill: bool = False

    def __post_init__(self) -> None:
        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigurationError(
                f"unknown time zone {self.tz!r}: use an IANA name like 'UTC' or 'Europe/Paris'"
            ) from None
        try:
            CronSim(self.cron, datetime.now(zone))
        except (CronSimError, TypeError, AttributeError) as exc:
            raise ConfigurationError(
                f"invalid schedule {self.cron!r}: {exc} (write cron like '*/5 * * * *', or "
                "6 fields with seconds first)"
            ) from None

    def after(self, instant: datetime) -> datetime:
        """The first tick strictly after `instant`, in UTC."""
        tick = next(CronSim(self.cron, instant.astimezone(ZoneInfo(self.tz))))
        return tick.astimezone(UTC)

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.cron, "tz": self.tz, "backfill": self.backfill}


def tick_key(workflow: str, tick: datetime) -> str:
    """The idempotency key of the run of `tick`."""
    return f"schedule:{workflow}:{tick.astimezone(UTC).isoformat()}"


class Scheduler:
    """Starts the runs of the app's scheduled workflows, tick by tick, until cancelled."""

    def __init__(self, app: Durably, workflows: list[Workflow[Any, Any]]) -> None:
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
        pending: dict[Workflow[Any, Any], collections.deque[datetime]] = {}
        for wf in self.workflows:
            pending[wf] = await self._retrying(self._first_ticks, wf)
        while True:
            now = self._now()
            for wf, ticks in pending.items():
                assert wf.schedule is not None
                while ticks[0] <= now:
                    await self._retrying(self._fire, wf, ticks[0])
                    tick = ticks.popleft()
                    if not ticks:
                        ticks.append(wf.schedule.after(tick))
            wait = min(t[0] for t in pending.values()) - self._now()
            await asyncio.sleep(max(wait.total_seconds(), 0.001))

    async def _retrying(self, fn: Any, *args: Any) -> Any:
        delay = 0.1
        while True:
            try:
                return await fn(*args)
            except DatabaseUnavailable as exc:
                log.warning("schedules: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _first_ticks(self, wf: Workflow[Any, Any]) -> collections.deque[datetime]:
        """The ticks to start first: the next one, or (backfill) every one since the
        last recorded, up to now, and the next."""
        assert wf.schedule is not None
        now = self._now()
        ticks: collections.deque[datetime] = collections.deque(maxlen=MAX_BACKFILL)
        if wf.schedule.backfill:
            await self.app.open()
            rows = await self.app.store.db.fetch(
                "schedule_last_tick", namespace=self.app.namespace, workflow=wf.name
            )
            last = _instant(rows[0]["last_tick"]) if rows else None
            tick = wf.schedule.after(last) if last is not None else now
            while last is not None and tick <= now:
                ticks.append(tick)
                tick = wf.schedule.after(tick)
        next_tick = wf.schedule.after(now)
        if not ticks or ticks[-1] < next_tick:
            ticks.append(next_tick)
        return collections.deque(ticks)

    async def _fire(self, wf: Workflow[Any, Any], tick: datetime) -> None:
        assert wf.schedule is not None
        at = tick.astimezone(UTC).isoformat()
        try:
            handle = await wf.start(
                {"scheduled_at": at} if wf.takes_input else None,
                idempotency_key=tick_key(wf.name, tick),
            )
        except DatabaseUnavailable:
            raise
        except Exception:
            log.exception("schedule of %s: could not start the run of %s", wf.name, at)
            return
        await self.app.store.db.fetch(
            "schedule_ticked", namespace=self.app.namespace, workflow=wf.name,
            schedule=wf.schedule.cron, tz=wf.schedule.tz, tick=tick,
        )  # fmt: skip
        log.debug("schedule of %s: run %s for %s", wf.name, handle.run_id, at)


def _instant(value: Any) -> datetime | None:
    """A stored time (SQLite keeps Unix seconds under a name the connector does not
    convert)."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(float(value), UTC)


def next_ticks(app: Durably) -> list[dict[str, Any]]:
    """`[{"workflow", "version", "schedule", "tz", "backfill", "next_at"}]` of the app's
    scheduled workflows, by the clock now."""
    now = datetime.fromtimestamp(app.clock.time(), UTC)
    out = []
    for wf in app.workflows.values():
        if wf.schedule is not None:
            out.append({"workflow": wf.name, "version": wf.version, **wf.schedule.to_dict(),
                        "next_at": wf.schedule.after(now).isoformat()})  # fmt: skip
    return out
