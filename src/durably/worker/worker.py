"""The worker: claims due runs, executes them, renews their leases, drains on SIGTERM.

Idle, a worker waits for a wake-up (PostgreSQL NOTIFY; SQLite's data_version) or the
next known due time, with a slow poll only as a fallback, so an idle worker costs about
two queries per poll interval. Leases are renewed for all held runs in one statement; a
run whose lease is lost (or that is canceled) has its step bodies cancelled at once.
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
from ..execution.runlog import Stop
from ..store.confirm import ClaimConfirmation
from ..store.queues import QueueClaims
from ..store.recorder import StepRecorder
from ..workflow.queue import Queue
from . import retention as _retention
from .byname import served
from .claimer import Claimer
from .early import EarlyCancels
from .host import Host
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
        self.running: dict[str, tuple[Execution, asyncio.Task[None]]] = {}
        self._lease_until: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._hint = True  # there may be due runs: claim at the next chance
        self._stopping = asyncio.Event()
        self._recorder = StepRecorder(app.store, self.worker_id)
        self._threads = concurrent.futures.ThreadPoolExecutor(
            self.concurrency, thread_name_prefix="durably-step"
        )
        self._timers: list[asyncio.TimerHandle] = []
        self._check_task: asyncio.Task[None] | None = None
        self._changed = False  # SQLite: a commit seen that no check has looked at yet
        self._seen = float("-inf")  # when the workers table last heard of us (loop time)
        self._background: asyncio.Task[None] | None = None
        self._claimer = Claimer(app, self.worker_id, self.lease_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Done when `run()` has returned (a concurrent future: awaitable from any loop).
        self.ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._watchers: list[asyncio.Future[None]] = []  # see `next_change`
        self._round_waiters: list[asyncio.Future[bool]] = []  # see `claim_round`
        self._claiming = False  # the claim loop runs
        self.executed = 0  # runs this worker has begun to execute (see `claim_round`)
        self._early = EarlyCancels(self.lease_s)
        self._asks: set[asyncio.Task[None]] = set()  # renewals of runs canceled early
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
        stop_listening = await self.app.connector.listen(self._on_message)
        beat = asyncio.create_task(self._heartbeat_loop(), name="durably-heartbeat")
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
            await self._drain()
        finally:
            watchdog.stop()
            checks = [t for t in (beat, self._check_task, scheduler, housekeeping) if t]
            checks += self._asks
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

    def _pairs(self) -> list[tuple[str, str]]:
        # Advertised with `(name, NEWEST)`: `list_stuck` then leaves out the runs thin
        # clients started that this worker will bind (see `byname`).
        return [(s.workflow, s.version) for s in served(self.app.workflows)]

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
            lambda: self._renew([run_id]), confirm, self.app.max_history_bytes,
            self.hold_mismatches,
        )  # fmt: skip
        task = asyncio.create_task(execution.execute(), name=f"durably-run-{run_id}")
        self.running[run_id] = (execution, task)
        self.executed += 1
        self._claimer.started(run_id, row.get("queue"))
        self._lease_until[run_id] = asyncio.get_running_loop().time() + self.lease_s
        task.add_done_callback(lambda _: self._finished(run_id, task))
        self._activity()
        if self._early.claimed(run_id, asyncio.get_running_loop().time()):
            ask = asyncio.create_task(self._ask(run_id), name=f"durably-ask-{run_id}")
            self._asks.add(ask)
            ask.add_done_callback(self._asks.discard)

    async def _ask(self, run_id: str) -> None:
        """A cancel of `run_id` was notified before its claim returned: the database
        decides (a renewal halts it if it is canceled still)."""
        try:
            await self._renew([run_id])
        except DatabaseUnavailable as exc:  # the next heartbeat asks again
            log.warning("run %s: could not look for a cancel: %s", run_id, exc)
        except Exception:  # a defect: said loudly, never an unretrieved task's error
            log.exception("run %s: looking for a cancel failed", run_id)

    def _finished(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self.running.get(run_id, (None, None))[1] is task:
            del self.running[run_id]
            self._lease_until.pop(run_id, None)
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

    def _poke(self, run_id: str) -> None:
        entry = self.running.get(run_id)
        if entry is not None:
            entry[0].poke()

    def _on_message(self, message: str) -> None:
        if message.startswith("ended:"):  # for those waiting for a result (`_endwatch`)
            return
        if message.startswith("cancel:"):
            run_id = message.removeprefix("cancel:")
            if run_id in self.running:
                self._halt(run_id, Stop("canceled", "canceled"))
            else:  # its claim may be on its way back: see EarlyCancels
                self._early.remember(run_id, asyncio.get_running_loop().time())
        elif message.startswith("wake:"):
            self._poke(message.removeprefix("wake:"))
            return
        elif message == "changed" and self.running:
            # SQLite: some commit happened, maybe our own (so at most ten a second): check
            # our runs are still ours, and look for new work if a slot is free.
            self._changed = True
            if self._check_task is None or self._check_task.done():
                self._check_task = asyncio.create_task(self._check_held())
            return
        self._announce()

    async def _check_held(self) -> None:
        # Commits seen while a round is under way make one more round: none is dropped.
        while self._changed:
            self._changed = False
            held = self._held()
            with contextlib.suppress(DatabaseUnavailable):
                still = await self.app.store.check_held(self.worker_id, held)
                self._settle(held, still, "the run was taken over")
            if len(self.running) < self.concurrency:
                self._announce()
            await asyncio.sleep(0.1)  # at most ten rounds a second

    def _halt(self, run_id: str, stop: Stop) -> None:
        """Stop executing a run: its step bodies are interrupted at once."""
        entry = self.running.get(run_id)
        if entry is not None and stop.replaces(entry[0].stop):
            log.warning("run %s: %s; cancelling its step bodies", run_id, stop)
            entry[0].halt(stop)

    # --------------------------------------------------------------- leases

    def _held(self) -> dict[str, int]:
        return {run_id: x.lease.fence for run_id, (x, _) in self.running.items()}

    async def _renew(self, run_ids: list[str]) -> None:
        held = {k: v for k, v in self._held().items() if k in run_ids}
        if not held:
            return
        sent = asyncio.get_running_loop().time()
        still = await self.app.store.heartbeat(self.worker_id, held, self.lease_s)
        for run_id in still:
            self._lease_until[run_id] = sent + self.lease_s
        self._settle(held, still, "its lease was lost")

    def _settle(self, held: dict[str, int], still: dict[str, Row], lost: str) -> None:
        """Act on what the database said of the runs held when it was asked."""
        for run_id, fence in held.items():
            entry = self.running.get(run_id)
            if entry is None or entry[0].lease.fence != fence:
                continue  # ended, or claimed again, since the question was asked
            row = still.get(run_id)
            if row is None:
                if not entry[0].concluded:  # else it let go itself, as the question was asked
                    self._halt(run_id, Stop(lost))
            elif row["status"] == "canceled":  # in case its NOTIFY was missed
                self._halt(run_id, Stop("canceled", "canceled"))
            elif row["wake_requested"]:
                self._poke(run_id)

    async def _heartbeat_loop(self) -> None:
        """Beat every `heartbeat`, and halt each run whose lease ends before it is renewed.

        The local lease deadlines are checked on time whatever the database does: a beat
        runs as a task of its own that this loop waits for only until the next deadline
        or beat, and a beat still waiting (a silent network) is not started again. It is
        not cancelled either: unwinding a statement on a dead connection takes seconds
        (psycopg asks the server to cancel it), and the connector's own deadline ends it.
        """
        loop = asyncio.get_running_loop()
        beat: asyncio.Task[None] | None = None
        next_beat, late = loop.time(), False
        try:
            while True:
                now = loop.time()
                if now >= next_beat:
                    next_beat = now + self.heartbeat_s
                    if beat is None or beat.done():
                        beat, late = asyncio.create_task(self._beat(), name="durably-beat"), False
                    elif not late:  # said once per beat
                        late = True
                        log.warning("heartbeat: the database has not answered for %gs",
                                    self.heartbeat_s)  # fmt: skip
                wake = min([next_beat, *self._lease_until.values()])
                timeout = max(0.005, wake - loop.time())
                if beat is not None and not beat.done():
                    await asyncio.wait([beat], timeout=timeout)
                else:
                    await asyncio.sleep(timeout)
                self._expire(loop.time())
        finally:
            if beat is not None and not beat.done():
                beat.cancel()
                await asyncio.wait([beat], timeout=1.0)

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._renew(list(self.running))  # first: the leases cannot wait
            if loop.time() - self._seen >= self.heartbeat_s:
                await self.app.store.worker_seen(self.worker_id, self._pairs(), self.concurrency)
                # Its queues stay declared (a full worker claims none of them meanwhile).
                await QueueClaims(self.app.store).renew([q.name for q in self._queues()],
                                                        self.lease_s)  # fmt: skip
                self._seen = loop.time()
        except DatabaseUnavailable as exc:
            log.warning("heartbeat failed: %s", exc)
        except Exception:
            log.exception("heartbeat failed")

    def _expire(self, now: float) -> None:
        for run_id, until in list(self._lease_until.items()):
            if until <= now:
                del self._lease_until[run_id]
                self._halt(run_id, Stop("its lease expired before it could be renewed"))

    # --------------------------------------------------------------- shutdown

    async def _drain(self) -> None:
        if not self.running:
            return
        log.info("draining %d runs (up to %.0fs)", len(self.running), self.grace_s)
        tasks = [task for _, task in self.running.values()]
        await asyncio.wait(tasks, timeout=self.grace_s)
        for x, task in list(self.running.values()):
            if not task.done():
                self._halt(x.run_id, Stop("the worker is shutting down", release=True))
        await asyncio.gather(*(task for _, task in self.running.values()),
                             return_exceptions=True)  # fmt: skip
