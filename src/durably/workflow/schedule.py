"""A workflow's schedule as declared: `@app.workflow(schedule="*/5 * * * *", tz=, backfill=)`,
parsed by `cronsim`. The worker's task that starts its runs is `worker.scheduler`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..core.errors import ConfigurationError


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

    def due(self, since: datetime | None, until: datetime, limit: int) -> list[datetime]:
        """The ticks after `since` (None: any) up to `until` included, in UTC, oldest
        first: the newest `limit` of them (counted back from `until`, so a week of
        missed seconds costs `limit` steps, not 600,000)."""
        start = (until + timedelta(microseconds=1)).astimezone(ZoneInfo(self.tz))
        ticks: list[datetime] = []
        for tick in CronSim(self.cron, start, reverse=True):
            at = tick.astimezone(UTC)
            if len(ticks) >= limit or (since is not None and at <= since):
                break
            ticks.append(at)
        return ticks[::-1]

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.cron, "tz": self.tz, "backfill": self.backfill}


def tick_key(workflow: str, tick: datetime) -> str:
    """The idempotency key of the run of `tick`."""
    return f"schedule:{workflow}:{tick.astimezone(UTC).isoformat()}"
