"""The last tick each scheduled workflow of a namespace started (the `schedules` table),
from which a schedule with `backfill=True` catches up."""

from __future__ import annotations

from datetime import datetime

from .store import Store


class Ticks:
    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.namespace = store.namespace

    async def last(self, workflow: str) -> datetime | None:
        rows = await self.db.fetch(
            "schedule_last_tick", namespace=self.namespace, workflow=workflow
        )
        return rows[0]["last_tick_at"] if rows else None

    async def ticked(self, workflow: str, cron: str, tz: str, tick: datetime) -> None:
        await self.db.fetch(
            "schedule_ticked", namespace=self.namespace, workflow=workflow,
            schedule=cron, tz=tz, tick=tick,
        )  # fmt: skip
