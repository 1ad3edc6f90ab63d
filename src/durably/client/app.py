"""`Durably`: the registry of workflows and the client API (start, signal, cancel, query)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Self, TypeVar

from ..backends import connect
from ..core.attributes import Attributes, encode_attributes
from ..core.clock import Clock
from ..core.codec import DEFAULT_MAX_HISTORY, DEFAULT_MAX_PAYLOAD, encode
from ..core.durations import Duration, parse_duration
from ..core.errors import ConfigurationError, WorkflowNotFound
from ..core.retry import WORKFLOW_DEFAULT, RetryPolicy
from ..core.sealing import Codec, codec_from_env
from ..store.endwatch import EndWatch
from ..store.models import Run
from ..store.operations import Operations
from ..store.records import NEWEST
from ..store.sends import check_signal_name
from ..store.store import Store
from ..workflow.definition import WorkflowFn
from ..workflow.queue import Queue
from ..workflow.schedule import Schedule
from .handle import RunHandle
from .operating import Operating
from .reads import Reads
from .requests import Requesting
from .starting import Starting
from .streams import read_stream
from .workflow import Workflow, WorkflowDecorator

if TYPE_CHECKING:
    from ..worker.worker import Worker

DEFAULT_URL = "sqlite:///durably.db"
log = logging.getLogger("durably.worker")

P = ParamSpec("P")
T = TypeVar("T")


def _delegated(
    to: str, method: Callable[Concatenate[Any, P], Awaitable[T]]
) -> Callable[Concatenate[App, P], Coroutine[Any, Any, T]]:
    """`App`'s method that hands the call to its collaborator `self.<to>` (documented
    there)."""

    async def call(self: App, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await method(getattr(self, to), *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


def _operated(
    method: Callable[Concatenate[Operating, P], Awaitable[T]],
) -> Callable[Concatenate[App, P], Coroutine[Any, Any, T]]:
    """`App`'s method that hands the call to its `Operating`."""
    return _delegated("_operating", method)


def _requested(
    method: Callable[Concatenate[Requesting, P], Awaitable[T]],
) -> Callable[Concatenate[App, P], Coroutine[Any, Any, T]]:
    """`App`'s method that hands the call to its `Requesting`."""
    return _delegated("_requesting", method)


def _started(
    method: Callable[Concatenate[Starting, P], Awaitable[T]],
) -> Callable[Concatenate[App, P], Coroutine[Any, Any, T]]:
    """`App`'s method that hands the call to its `Starting`."""
    return _delegated("_starting", method)


class App:
    """The registry of workflows and the async client API: all of `Durably` but its
    `sync` facade, which wraps this (`client.durably`)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str = "durably",
        namespace: str = "default",
        migrate: bool = True,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        pool_size: int = 10,
        max_step_attempts: int = 1000,
        max_history_bytes: int = DEFAULT_MAX_HISTORY,
        clock: Clock | None = None,
        retention: Duration | None = None,
        read_url: str | None = None,
        codec: Codec | None = None,
    ) -> None:
        self.url = url or os.environ.get("DURABLY_DATABASE_URL") or DEFAULT_URL
        self.read_url = read_url or os.environ.get("DURABLY_READ_DATABASE_URL") or None
        self.clock = clock or Clock()
        self.namespace = namespace
        self._pool_size = pool_size
        self.max_payload = max_payload_bytes
        self.max_step_attempts = max_step_attempts
        self.max_history_bytes = max_history_bytes
        self._migrate = migrate
        self._opened = False
        # Made by `worker()`: each holds the store it was made with, so `rebind` refuses
        # while one has not ended (a worker that ended stays on its database).
        self._workers: weakref.WeakSet[Worker] = weakref.WeakSet()
        self._open_lock: asyncio.Lock | None = None
        self.workers_running: set[Worker] = set()  # those `close()` stops first
        self.workflows: dict[tuple[str, str], Workflow[Any, Any]] = {}
        self.queues: dict[str, Queue] = {}
        self.retention = parse_duration(retention) if retention is not None else None
        # Payloads at rest (SPEC §4.24): sealed by this codec, default the keys of
        # $DURABLY_CODEC_KEYS; without one, sealed values read as "<encrypted>".
        self.codec = codec if codec is not None else codec_from_env()
        self._connect(schema)

    def __repr__(self) -> str:
        return f"<Durably {self.connector.dialect} schema={self.connector.schema}>"

    def rebind(self, url: str, schema: str | None = None, read_url: str | None = None) -> Self:
        """Point this (not yet opened) app at another database (and schema, and replica
        for its reads); the app."""
        if self._opened:
            raise RuntimeError("rebind() must come before the app connects")
        if any(not w.ended.done() for w in self._workers):
            raise RuntimeError("rebind() must come before app.worker(), or after it ended")
        self.url, self.read_url = url, read_url or self.read_url
        self._connect(self.connector.schema if schema is None else schema)
        return self

    def _connect(self, schema: str) -> None:
        """The connections to `self.url`, and what works through them."""
        self.connector = connect(self.url, schema, self.clock, self._pool_size)
        self.store = Store(self.connector, self.namespace, self.codec)
        self.reads = Reads(self.store, self.clock, (self.url, self.read_url), self._pool_size)
        self.end_watch = EndWatch(self.store.db, self.store.channel)
        self._operating = Operating(
            self, self.reads, self.end_watch, self.workflows, self.max_payload
        )
        self._requesting = Requesting(self, self.store, self.end_watch, self.max_payload)
        self._starting = Starting(self, self.reads)

    # ----------------------------------------------------------------- registry

    def queue(
        self,
        name: str,
        concurrency: int | None = None,
        per_key: int | None = None,
        rate: str | None = None,
        priority: bool = False,
        on_full: str = "wait",
    ) -> Queue:
        """Declare a queue (flow control, enforced by the database across workers).

        Args:
            name: the queue's name.
            concurrency: at most this many of its runs running at once.
            per_key: at most this many running per `start(..., concurrency_key=)`.
            rate: `"N/DURATION"` (e.g. `"10/1m"`): at most N runs started per window.
            priority: claim larger `start(..., priority=)` first (FIFO within one).
            on_full: a start whose `concurrency_key` is full: "wait" (queue it),
                "cancel_running" (cancel the key's older runs: the newest runs) or
                "cancel_new" (cancel the newcomer at once); needs `per_key`.

        Raises:
            ConfigurationError: a bad limit or rate, or the name declared otherwise before.
            InvalidInput: an `on_full` not listed, or without `per_key`.

        Example:
            ```python
            downloads = app.queue("downloads", concurrency=3, per_key=1)

            @app.workflow(name="fetch", queue=downloads)
            async def fetch(ctx, url: str) -> None: ...

            await fetch.start(url, concurrency_key="tracker-a")
            ```
        """
        q = Queue(name, concurrency, per_key, rate, priority, on_full)
        if self.queues.setdefault(name, q) != q:
            raise ConfigurationError(f"queue {name!r} is already declared as {self.queues[name]}")
        return q

    def workflow(
        self,
        name: str | None = None,
        version: str = "v1",
        retry: RetryPolicy | None = None,
        *,
        queue: Queue | str | None = None,
        schedule: str | None = None,
        tz: str = "UTC",
        backfill: bool = False,
    ) -> WorkflowDecorator:
        """Register an async function (or a sync one) as workflow `(name, version)`.

        Its first parameter receives a `WorkflowContext` (a plain `def`: a
        `SyncWorkflowContext`, whose steps return their results); a second one, if declared,
        receives the input, validated against its annotation (pydantic). The result is a
        `Workflow[In, Out]` typed by those annotations.

        Args:
            queue: a queue of this app (`app.queue(...)`) its runs are claimed through.
            schedule: cron (`"*/5 * * * *"`; 6 fields: seconds first): workers start one
                run per tick, with input `{"scheduled_at": ISO}`.
            tz: the time zone the schedule is read in.
            backfill: start the ticks missed while no worker ran.

        Example:
            ```python
            @app.workflow(name="ship", version="v1")
            async def ship(ctx: WorkflowContext, order: Order) -> Receipt: ...

            handle = await ship.start(Order(id="o1"))  # RunHandle[Receipt]
            ```
        """
        q = self._known_queue(queue)
        plan = Schedule(schedule, tz, backfill) if schedule is not None else None

        def register(fn: WorkflowFn) -> Workflow[Any, Any]:
            wf: Workflow[Any, Any] = Workflow(
                self, fn, name or fn.__name__, version, retry or WORKFLOW_DEFAULT,
                queue=q, schedule=plan,
            )  # fmt: skip
            if wf.version == NEWEST:
                raise ConfigurationError(
                    f"workflow {wf.name!r} needs a version (a non-empty string, e.g. 'v1')"
                )
            if plan is not None and wf.takes_input:
                wf.parse_input({"scheduled_at": "2026-01-01T00:00:00+00:00"})
            if (wf.name, wf.version) in self.workflows:
                raise ConfigurationError(
                    f"workflow {wf.name}@{wf.version} is registered already (by "
                    f"{self.workflows[(wf.name, wf.version)].fn.__qualname__}); a changed "
                    "workflow takes a new version, or ctx.patched() for runs in flight"
                )
            self.workflows[(wf.name, wf.version)] = wf
            return wf

        return register

    def _known_queue(self, queue: Queue | str | None) -> Queue | None:
        if queue is None:
            return None
        name = queue.name if isinstance(queue, Queue) else queue
        if name not in self.queues or (isinstance(queue, Queue) and self.queues[name] != queue):
            known = ", ".join(sorted(self.queues)) or "none"
            raise ConfigurationError(
                f"unknown queue {name!r} (declared: {known}); declare it with app.queue()"
            )
        return self.queues[name]

    def get_workflow(self, name: str, version: str | None = None) -> Workflow[Any, Any]:
        """The registered workflow; the newest registered version when none is given."""
        if version is not None and (name, version) in self.workflows:
            return self.workflows[(name, version)]
        versions = [wf for (n, _), wf in self.workflows.items() if n == name]
        if versions and version is None:
            return versions[-1]
        known = ", ".join(sorted(f"{n}@{v}" for n, v in self.workflows)) or "none"
        wanted = f"{name}@{version}" if version else name
        raise WorkflowNotFound(f"unknown workflow {wanted!r} (registered: {known})")

    # ----------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Connect, and apply migrations unless `migrate=False` (done lazily otherwise)."""
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._opened:
                return
            if self._migrate:
                await self.connector.migrate()
            await self.connector.open()
            self._opened = True

    async def migrate(self) -> list[str]:
        """Apply pending migrations; the names of those applied now."""
        return await self.connector.migrate()

    async def close(self) -> None:
        """Stop the workers of this app still running, then close every connection.

        Each worker stops as on SIGTERM: it claims no more, lets its runs end within its
        `shutdown_grace` and releases the others (claimable at once). The wait is bounded:
        a worker whose loop does not get there in time is left behind, logged.
        """
        workers = list(self.workers_running)
        for worker in workers:
            worker.stop()
        for worker in workers:
            limit = worker.stop_within
            # Waited for, never cancelled: a later close() must find `ended` still pending.
            _, late = await asyncio.wait({asyncio.wrap_future(worker.ended)}, timeout=limit)
            if late:
                log.error("worker %s did not stop within %gs of close(); its runs are left "
                          "to their leases", worker.worker_id, limit)  # fmt: skip
        await self.end_watch.close()
        await self.reads.close()
        await self.connector.close()
        self._opened = False

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- client API

    create_run = _started(Starting.create_run)
    start = _started(Starting.start)

    async def send_signal(
        self,
        name: str,
        data: Any = None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        connection: Any = None,
        expires: Duration | None = None,
    ) -> dict[str, Any]:
        """Send a durable signal.

        Every run waiting on `name` receives it; with none waiting it is stored and the
        next `wait_for_signal(name)` receives it. `run_id` addresses one run (refused when
        that run has finished). A buffered signal past `expires` is never delivered.

        Returns:
            `{"delivered_to": [run ids], "buffered": bool, "duplicate": bool}`
        """
        check_signal_name(name)
        expires_s = parse_duration(expires).total_seconds() if expires is not None else None
        await self.open()
        data_json = encode(data, f"the data of signal {name!r}", self.max_payload, self.codec)
        self.reads.wrote()
        return await self.store.sends.send_signal(
            name, data_json, idempotency_key, run_id, connection, expires_s
        )

    async def cancel(self, run_id: str) -> Run:
        """Cancel a run and its children; a step in flight is interrupted. A held run
        ends too; its undos run once code that matches its history claims it. A run that
        continued as new: the live run of its chain is canceled (and returned).

        Raises:
            RunNotFound: no such run.
            RunTerminalError: the run already finished (the message names its status).
        """
        await self.open()
        self.reads.wrote()
        return await self.store.cancel(
            run_id, {"type": "Canceled", "message": "the run was canceled"}
        )

    async def get_run(self, run_id: str) -> Run:
        """The run as stored now (RunNotFound if there is none); from the replica, if
        any, unless this client wrote just now (`client/reads.py`)."""
        await self.open()
        return await self.reads.read(lambda store: store.get_run(run_id))

    async def list_runs(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        offset: int = 0,
        created_after: datetime | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        attributes: Attributes | None = None,
    ) -> list[Run]:
        """Runs, newest first, filtered by status, workflow name, queue, creation time, the
        idempotency key they were started with and search attributes (each key with an
        equal value: `attributes={"customer": "c-1"}`; numbers by value)."""
        filter_json = encode_attributes(attributes, "the attributes filter")
        await self.open()
        return await self.reads.read(lambda store: store.list_runs(
            status=status, workflow=workflow, limit=limit, offset=offset,
            created_after=created_after, queue=queue, idempotency_key=idempotency_key,
            attributes_json=filter_json,
        ))  # fmt: skip

    def schedules(self) -> list[dict[str, Any]]:
        """The scheduled workflows of this app with their next tick (`next_at`, ISO)."""
        from ..worker.scheduler import next_ticks

        return next_ticks(self)

    def handle(self, run_id: str) -> RunHandle[Any]:
        """A handle on an existing run (its result is plain JSON; `Workflow.handle` types it).
        Nothing is read: `run_handle` checks that the run exists."""
        return RunHandle(self, run_id)

    run_handle = _started(Starting.run_handle)

    # ----------------------------------------------------------------- operating runs

    @property
    def operations(self) -> Operations:
        """The operators' side of the tables (the dashboard reads a run's log with it)."""
        return self._operating.operations

    resume = _operated(Operating.resume)
    fork = _operated(Operating.fork)
    run_id_from_prefix = _operated(Operating.run_id_from_prefix)
    get_event = _operated(Operating.get_event)
    list_events = _operated(Operating.list_events)
    list_signals = _operated(Operating.list_signals)
    delete_signal = _operated(Operating.delete_signal)
    purge = _operated(Operating.purge)
    list_stuck = _operated(Operating.list_stuck)
    queue_counts = _operated(Operating.queue_counts)
    list_tables = _operated(Operating.list_tables)
    list_steps = _operated(Operating.list_steps)

    def read_stream(self, run_id: str, key: str, offset: int = 0) -> AsyncIterator[Any]:
        """The values run `run_id` writes to its stream `key`, from `offset` on, in order:
        those written already, then each as it is written, until the stream is closed
        (`ctx.step.close_stream`, or the run's end). A reader that starts late loses
        nothing. RunNotFound: no such run.

        Example:
            ```python
            async for token in app.read_stream(run_id, "tokens"):
                print(token, end="")
            ```
        """
        return read_stream(self._operating, run_id, key, offset)

    list_streams = _operated(Operating.list_streams)
    request = _requested(Requesting.request)
    send_request = _requested(Requesting.send)
    get_reply = _requested(Requesting.get_reply)

    # ----------------------------------------------------------------- workers

    def worker(
        self,
        concurrency: int = 10,
        lease: Duration = "30s",
        heartbeat: Duration = "10s",
        worker_id: str | None = None,
        poll_interval: Duration = "5s",
        shutdown_grace: Duration = "10s",
    ) -> Worker:
        """A worker that executes this app's workflows (`await worker.run()`)."""
        from ..worker.worker import Worker

        worker = Worker(self, concurrency, lease, heartbeat, worker_id, poll_interval,
                        shutdown_grace)  # fmt: skip
        self._workers.add(worker)
        return worker
