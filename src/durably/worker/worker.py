"""The worker: claims due runs, executes them, drains on SIGTERM.

Idle, a worker waits for a wake-up (PostgreSQL NOTIFY; SQLite's data_version) or the
next known due time, with a slow poll only as a fallback, so an idle worker costs about
two queries per poll interval. What it executes is `running.Running`; their leases are
kept by `leases.Leases`, and the notifications acted on by `notices.Notices`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import socket
import uuid
from datetime import datetime

from ..backends import Row
from ..core.durations import Duration, parse_duration
from ..core.errors import DatabaseUnavailable
from ..execution.execution import Execution
from ..execution.lifecycles import SETTLE_S
from ..store.confirm import ClaimConfirmation
from ..store.queues import QueueClaims
from ..store.recorder import StepRecorder
from ..workflow.queue import Queue
from . import retention as _retention
from .byname import served
from .claimer import Claimer
from .host import Host
from .leases import Leases
from .notices import Notices
from .running import Running
from .scheduler import Scheduler
from .sigint import defer_sigint
from .startline import start_line
from .watchdog import LoopWatchdog

log = logging.getLogger("durably.worker")


class Worker:
    """Executes the app's registered workflows. See `Durably.worker`."""

    def __init__(
        self,
        app: Host,
        concurrency: int = 10,
        lease: Duration = "30s",
        heartbeat: Duration = "10s",
        worker_id: str | None = None,
        poll_interval: Duration = "5s",
        shutdown_grace: Duration = "10s",
    ) -> None:
        self.app = app
        self.concurrency = max(1, concurrency)
        self.lease_s = parse_duration(lease).total_seconds()
        self.heartbeat_s = parse_duration(heartbeat).total_seconds()
        self.poll_s = parse_duration(poll_interval).total_seconds()
        self.grace_s = parse_duration(shutdown_grace).total_seconds()
        if self.heartbeat_s >= self.lease_s:
            self.heartbeat_s = self.lease_s / 3
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.running = Running()
        self._wake = asyncio.Event()
        self._hint = True  # there may be due runs: claim at the next chance
        self._stopping = asyncio.Event()
        self._recorder = StepRecorder(app.store, self.worker_id)
        self._threads = concurrent.futures.ThreadPoolExecutor(
            self.concurrency, thread_name_prefix="durably-step"
        )
        self._timers: list[asyncio.TimerHandle] = []
        self._leases = Leases(app.store, self.worker_id, self.lease_s, self.heartbeat_s,
                              self.running, self._alive)  # fmt: skip
        self._notices = Notices(app.store, self.worker_id, self.lease_s, self.concurrency,
                                self.running, self._announce)  # fmt: skip
        self._background: asyncio.Task[None] | None = None
        self._claimer = Claimer(app, self.worker_id, self.lease_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Done when `run()` has returned (a concurrent future: awaitable from any loop).
        self.ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._watchers: list[asyncio.Future[None]] = []  # see `next_change`
        self._round_waiters: list[asyncio.Future[bool]] = []  # see `claim_round`
        self._claiming = False  # the claim loop runs
        self.executed = 0  # runs this worker has begun to execute (see `claim_round`)
        # A replay that does not match its history holds the run (SPEC §4.2); durably.testing
        # fails it instead: there the code under test is the only code.
        self.hold_mismatches = True

    # --------------------------------------------------------------- lifecycle

    def stop(self) -> None:
        """Stop claiming; finish or release what is held, then return from `run()`.
        Callable from any thread."""
        loop = self._loop
        if loop is not None and loop is not asyncio._get_running_loop():
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing runs
                loop.call_soon_threadsafe(self.stop)
            return
        self._stopping.set()
        self._wake.set()

    @property
    def stop_within(self) -> float:
        """How long a stop may take: the drain, then its runs' last writes."""
        return self.grace_s + 3 * SETTLE_S

    async def __aenter__(self) -> Worker:
        """Run the worker in the background of this event loop (tests, embedding)."""
        self._background = asyncio.create_task(self.run(install_signals=False))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
        if self._background is not None:
            await self._background

    async def run(self, install_signals: bool = True) -> None:
        """Work until stopped (`stop()`, SIGTERM or SIGINT)."""
        loop = asyncio.get_running_loop()
        handled = False
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.stop)
                    handled = handled or sig is signal.SIGINT
        restore = None if handled else defer_sigint(loop)
        self._loop = loop
        if self.ended.done():  # run again
            self.ended = concurrent.futures.Future()
        self.app.workers_running.add(self)
        try:
            await self._work(loop)
        finally:
            if restore is not None:
                restore()
            self.app.workers_running.discard(self)
            if not self.ended.done():
                self.ended.set_result(None)

    async def _work(self, loop: asyncio.AbstractEventLoop) -> None:
        await self._open_with_backoff()
        stop_listening = await self.app.connector.listen(self._notices.on_message)
        beat = asyncio.create_task(self._leases.keep(), name="durably-heartbeat")
        scheduled = [wf for wf in self.app.workflows.values() if wf.schedule is not None]
        scheduler = None
        if scheduled and not self._stopping.is_set():
            scheduler = asyncio.create_task(Scheduler(self.app, scheduled).run(),
                                            name="durably-schedules")  # fmt: skip
        housekeeping = _retention.start(self.app, self.worker_id, self._stopping)
        watchdog = LoopWatchdog(loop, threshold=max(1.0, min(5.0, self.heartbeat_s)))
        watchdog.start()
        log.info("%s", start_line(self.app, self.worker_id, self.concurrency))
        try:
            await self._claim_loop()
            await self.running.drain(self.grace_s)
        finally:
            watchdog.stop()
            checks = [t for t in (beat, self._notices.check_task, scheduler, housekeeping) if t]
            checks += self._leases.asks
            for task in checks:
                task.cancel()
            await asyncio.gather(*checks, return_exceptions=True)
            await stop_listening()
            with contextlib.suppress(DatabaseUnavailable):
                await self.app.store.worker_gone(self.worker_id)
            for timer in self._timers:
                timer.cancel()
            self._threads.shutdown(wait=False, cancel_futures=True)
            log.info("worker %s stopped", self.worker_id)

    async def _open_with_backoff(self) -> None:
        delay = 0.1
        while not self._stopping.is_set():
            try:
                await self.app.open()
                await self.declare_queues(self.lease_s)
                return
            except DatabaseUnavailable as exc:
                log.warning("%s; retrying in %.1fs", exc, delay)
                await self._sleep(delay)
                delay = min(delay * 2, 5.0)

    def _queues(self) -> list[Queue]:
        return list({wf.queue for wf in self.app.workflows.values() if wf.queue})

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def next_due(self) -> tuple[datetime | None, datetime]:
        """When a run this worker serves may next be claimable, its queues' included
        (None: nothing known), and the database's time."""
        return await self._claimer.next_due()

    async def declare_queues(self, ttl: float) -> None:
        """Declare this worker's queues for `ttl` seconds from now (database time)."""
        await QueueClaims(self.app.store).declare(self._queues(), ttl)

    def _pairs(self) -> list[tuple[str, str]]:
        # Advertised with `(name, NEWEST)`: `list_stuck` then leaves out the runs thin
        # clients started that this worker will bind (see `byname`).
        return [(s.workflow, s.version) for s in served(self.app.workflows)]

    async def _alive(self) -> None:
        """Tell the workers table what this worker serves; its queues stay declared (a full
        worker claims none of them meanwhile). Part of the heartbeat (`Leases`)."""
        await self.app.store.worker_seen(self.worker_id, self._pairs(), self.concurrency)
        await QueueClaims(self.app.store).renew([q.name for q in self._queues()],
                                                self.lease_s)  # fmt: skip

    def next_change(self) -> asyncio.Future[None]:
        """A future done at this worker's next change of activity: a run it starts or
        stops executing, or a round of claims that found nothing. `durably.testing` waits
        on it to see the runs settle, instead of polling."""
        future = asyncio.get_running_loop().create_future()
        self._watchers.append(future)
        return future

    def claim_round(self) -> asyncio.Future[bool]:
        """A future of the next claim round, begun after this call: True if it claimed
        nothing while no run was executing. `durably.testing` asks for one to tell due runs
        a queue's limit holds back (none claimed) from due runs not claimed yet; with
        `executed` unchanged since its look, no claim in flight then got a run either."""
        future = asyncio.get_running_loop().create_future()
        if not self._claiming:
            future.set_result(False)  # no round will come
        else:
            self._round_waiters.append(future)
            self._announce()
        return future

    def _activity(self) -> None:
        watchers, self._watchers = self._watchers, []
        for future in watchers:
            if not future.done():
                future.set_result(None)

    # --------------------------------------------------------------- claiming

    async def _claim_loop(self) -> None:
        self._claiming = True
        try:
            await self._claim_rounds()
        finally:
            self._claiming = False
            for future in self._round_waiters:
                if not future.done():
                    future.set_result(False)  # no round will come
            self._round_waiters = []

    async def _claim_rounds(self) -> None:
        backoff = 0.1
        # While busy, a finished run alone does not trigger a claim: slots are gathered
        # into batches of a quarter of the concurrency, so a saturated worker claims a few
        # runs per statement instead of one. New work announced (NOTIFY, a due timer)
        # triggers a claim at once, and so does an idle worker.
        batch = max(1, self.concurrency // 4)
        while not self._stopping.is_set():
            self._wake.clear()
            timeout = self.poll_s
            free = self.concurrency - len(self.running)
            asked, self._round_waiters = self._round_waiters, []
            quiet = False
            try:
                if free > 0 and (self._hint or free >= batch or not self.running):
                    self._hint = False
                    rows = await self._claimer.claim(free, list(self.running))
                    quiet = not rows and not self.running
                    for row, confirm in rows:
                        self._execute(row, confirm)
                    if len(rows) == free:
                        self._hint = True  # there may be more
                        continue
                    if not rows:
                        self._activity()
                    if not rows and not self.running:
                        next_at, db_now = await self._claimer.next_due()
                        if next_at is not None:
                            delay = (next_at - db_now).total_seconds()
                            timeout = min(timeout, max(delay, 0.001))
                    if self._claimer.retry_in is not None:  # a queue's rate window reopens
                        timeout = min(timeout, self._claimer.retry_in)
                backoff = 0.1
            except DatabaseUnavailable as exc:
                log.warning("%s; retrying in %.1fs", exc, backoff)
                timeout, backoff = backoff, min(backoff * 2, 5.0)
                self._hint = True
            except Exception:  # a defect: said loudly, but the worker keeps its runs going
                log.exception("claim failed; retrying in %.1fs", backoff)
                timeout, backoff = backoff, min(backoff * 2, 5.0)
                self._hint = True
            finally:
                for future in asked:
                    if not future.done():
                        future.set_result(quiet)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # no task of its own, as wait_for makes
                    await self._wake.wait()
            if not self._wake.is_set():
                self._hint = True  # the poll interval or a due time passed

    def _execute(self, row: Row, confirm: ClaimConfirmation | None) -> None:
        wf = self.app.workflows[(row["workflow"], row["version"])]
        run_id = row["id"]
        execution = Execution(
            self.app.store, wf, row, self.worker_id, self.app.clock, self._threads,
            self.app.max_payload, self.app.max_step_attempts, self._recorder, self._wake_at,
            lambda: self._leases.renew([run_id]), confirm, self.app.max_history_bytes,
            self.hold_mismatches,
        )  # fmt: skip
        task = asyncio.create_task(execution.execute(), name=f"durably-run-{run_id}")
        self.running.add(run_id, execution, task)
        self.executed += 1
        self._claimer.started(run_id, row.get("queue"))
        self._leases.taken(run_id)
        task.add_done_callback(lambda _: self._finished(run_id, task))
        self._activity()
        if self._notices.canceled_early(run_id):
            self._leases.ask(run_id)

    def _finished(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self.running.discard(run_id, task):
            self._leases.ended(run_id)
        if not task.cancelled() and task.exception() is not None:
            log.error("run %s: unexpected error", run_id, exc_info=task.exception())
        if self._claimer.ended(run_id):
            self._hint = True  # a slot of a queue that has runs waiting for one
        self._wake.set()
        self._activity()

    def _wake_at(self, delay: float | None) -> None:
        """A run parked for `delay` seconds: look for work again then."""
        if delay is None:
            return
        loop = asyncio.get_running_loop()
        self._timers = [t for t in self._timers if not t.cancelled()]
        self._timers.append(loop.call_later(max(delay, 0.0), self._announce))

    def _announce(self) -> None:
        self._hint = True
        self._wake.set()
