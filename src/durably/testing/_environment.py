"""`Environment`: a test database, an in-process worker and a clock that skips time."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ..core.clock import Clock
from ..core.durations import Duration, parse_duration
from ..core.errors import ConfigurationError
from . import _clock as c

if TYPE_CHECKING:
    from ..client.durably import Durably
    from ..worker.worker import Worker

# The runs' progress wakes the environment (`Worker.next_change`); this poll only covers
# what no event reports (e.g. a run made due by another process).
_FALLBACK_S = 0.1


class Environment:
    """Run an app's workflows in this process, on a test database, with time skipping.

    Args:
        app: the application under test; it must not be connected yet. The environment
            points it at `database` and a skipping clock, and gives both back on exit.
        database: "sqlite" (a temporary file) or a `postgresql://` URL of a database the
            test may use: the environment works in two schemas of its own there (the
            engine's tables, and `<schema>_testclock`), dropped when it closes, so
            nothing an earlier test left is seen.
        auto_skip: skip time by itself whenever every run waits while something awaits
            a run's result (`handle.result()`, `handle.wait()`), as Temporal's
            time-skipping environment does.
        concurrency: the in-process worker's slots.

    A replay that does not match the run's history fails the run here, with the
    `NonDeterminismError` (the code under test is the only code: it is not deterministic),
    where a worker in production holds the run for a fix (SPEC §4.2).

    Example:
        ```python
        async with Environment(app) as env:
            handle = await retention.start(order)
            await env.skip_time()  # the 7-day sleep is over
            assert await handle.result() == "cleaned"
        ```
    """

    def __init__(
        self, app: Durably, database: str = "sqlite", *, auto_skip: bool = False,
        concurrency: int = 10,
    ) -> None:  # fmt: skip
        if database != "sqlite" and not database.startswith(("postgresql://", "postgres://")):
            raise ConfigurationError(
                f"Environment(database={database!r}): use 'sqlite' or a postgresql:// URL"
            )
        self.app = app
        self.database = database
        self.auto_skip = auto_skip
        self.concurrency = concurrency
        self.clock = c.SkippingClock()
        self._saved: tuple[str, str, Clock] | None = None
        self._schemas: list[str] = []  # PostgreSQL: made here, dropped on exit
        self._tmp: str | None = None
        self._pg_offset: c.PgOffset | None = None
        self._worker: Worker | None = None
        self._auto: asyncio.Task[None] | None = None

    @property
    def worker(self) -> Worker:
        """The in-process worker (running while the environment is open)."""
        if self._worker is None:
            raise RuntimeError("the environment is not open: use `async with Environment(...)`")
        return self._worker

    async def __aenter__(self) -> Environment:
        app = self.app
        if app._opened:
            raise RuntimeError("Environment(app): the app is connected already; close it first")
        self._saved = (app.url, app.connector.schema, app.clock)
        app.clock = self.clock
        try:
            await self._rebind()
            await app.open()
            self._worker = app.worker(self.concurrency, poll_interval="1s")
            # Here the code under test is the only code: a replay that does not match its
            # history is that code's non-determinism, so the run fails with it (a held run
            # would be claimed again at each back-off, skipped, forever).
            self._worker.hold_mismatches = False
            await self._worker.__aenter__()
        except BaseException:
            await self._restore()
            raise
        if self.auto_skip:
            self._auto = asyncio.create_task(self._skip_automatically(), name="durably-skip")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._auto is not None:
            self._auto.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._auto
        try:
            if self._worker is not None:
                await self._worker.__aexit__(*exc)
        finally:
            await self._restore()

    async def _rebind(self) -> None:
        if self.database == "sqlite":
            self._tmp = tempfile.mkdtemp(prefix="durably-test-")
            self.app.rebind(f"sqlite:///{self._tmp}/durably.db")
            return
        schema = c.test_schema(self.app.connector.schema)
        clock = c.clock_schema(schema)
        self._schemas = [schema, clock]
        await c.install_pg_clock(self.database, clock)
        self._pg_offset = c.PgOffset(self.database, clock)
        self.app.rebind(c.with_search_path(self.database, clock), schema)

    async def _restore(self) -> None:
        if self._pg_offset is not None:
            await self._pg_offset.close()
        await self.app.close()
        self._worker = None
        if self._saved is not None:
            url, schema, clock = self._saved
            self.app.clock = clock
            self.app.rebind(url, schema)
        if self._schemas:
            await c.drop_schemas(self.database, self._schemas)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # ------------------------------------------------------------------ time

    def now(self) -> datetime:
        """The environment's time (skipped time included)."""
        return datetime.fromtimestamp(self.clock.time(), UTC)

    async def skip_time(
        self, by: Duration | None = None, *, timeout: Duration = "30s"
    ) -> timedelta:
        """Wait until every run waits, then jump the clock; how far it jumped.

        Args:
            by: how far to jump; by default to the next timer (a sleep's end, a
                time-out, a retry's back-off, a delayed start). Without one, no jump.
            timeout: how long (real time) to wait for the runs to settle.

        Raises:
            TimeoutError: some run was still working after `timeout`.
        """
        next_at = await self.wait_until_idle(timeout)
        if by is not None:
            jump = parse_duration(by)
        elif next_at is None:
            return timedelta(0)
        else:
            jump = max(next_at - self.now(), timedelta(0)) + timedelta(milliseconds=1)
        await self._advance(jump.total_seconds())
        return jump

    async def wait_until_idle(self, timeout: Duration = "30s") -> datetime | None:
        """Wait until no run is due or running; the time of the next timer, if any.

        Event-driven: the database is asked again each time the in-process worker starts
        or stops executing a run, or finds nothing to claim (with a slow fallback poll).
        """
        limit = parse_duration(timeout).total_seconds()
        deadline = time.monotonic() + limit
        while True:
            change = self.worker.next_change()  # taken first: no change is missed
            idle, next_at = await self._idle()
            if idle:
                return next_at
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"runs were still working after {limit:g}s")
            await asyncio.wait([change], timeout=min(left, _FALLBACK_S))

    async def _idle(self) -> tuple[bool, datetime | None]:
        executed = self.worker.executed
        if self.worker.running:
            return False, None
        if await self.app.list_runs(status="running", limit=1):
            return False, None
        next_at, db_now = await self.worker.next_due()  # its queues' runs included
        if next_at is not None and next_at <= db_now:
            return False, None
        # A due run of a queue is not in `next_due` (it waits for a slot), and neither is a
        # run whose claim is in flight: a claim round begun after this look that claims
        # nothing proves that no run is due but held back by a limit, which only a run
        # ending frees. A claim in flight during the look may have brought a run (whose
        # lease is in `next_at`) that then parked before the round ended: `executed` says so.
        quiet = await self.worker.claim_round()
        return quiet and self.worker.executed == executed, next_at

    async def _advance(self, seconds: float) -> None:
        # The worker's queue declarations are dated by the database's clock: renewed past
        # the jump first, or its queues would lapse (and their limits with them) until the
        # worker's next renewal.
        await self.worker.declare_queues(seconds + self.worker.lease_s)
        self.clock.advance(seconds)
        if self._pg_offset is not None:
            await self._pg_offset.set(self.clock.offset)
        self.worker._announce()  # look for due runs now, not at the old wake-up time

    async def _skip_automatically(self) -> None:
        while True:
            changes = [self.worker.next_change(), self.clock.next_waiter()]
            if self.clock.waiters:
                idle, next_at = await self._idle()
                if idle and next_at is not None and self.clock.waiters:
                    await self.skip_time(timeout="1h")
                    continue
                if idle:  # the proving claim round was a change itself: wait for the next
                    changes[0] = self.worker.next_change()
            await asyncio.wait(changes, timeout=_FALLBACK_S,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
