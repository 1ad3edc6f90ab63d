"""Workflow definitions and run handles."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from ..core.codec import adapter, encode, validate
from ..core.durations import Duration, parse_duration, parse_instant
from ..core.errors import InvalidInput, RunFailedError, WorkflowTimeoutError
from ..core.limits import TimeUp, within
from ..core.retry import RetryPolicy
from ..store.models import Run
from ..store.queues import Queue, check_unqueued
from ..store.records import NewRun
from .syncflow import is_sync_workflow

if TYPE_CHECKING:
    from ..client.app import Durably
    from ..worker.scheduler import Schedule

WorkflowFn = Callable[..., Any]  # async, or a plain `def` (a sync workflow)

In = TypeVar("In", contravariant=True)
Out = TypeVar("Out", covariant=True)


class Workflow(Generic[In, Out]):
    """A registered workflow: `(name, version)` and its function (async, or sync).

    Created by `@app.workflow(...)`, which reads `In` and `Out` from the function's
    annotations: `async def f(ctx: WorkflowContext, order: Order) -> Done` makes a
    `Workflow[Order, Done]`, and a function without an input parameter a
    `Workflow[None, Done]`. Start runs with `await wf.start(input)`.
    """

    def __init__(
        self, app: Durably, fn: WorkflowFn, name: str, version: str, retry: RetryPolicy,
        queue: Queue | None = None, schedule: Schedule | None = None,
    ) -> None:  # fmt: skip
        self.sync = is_sync_workflow(fn)  # a plain `def`: see `_syncflow`
        self.app = app
        self.fn = fn
        self.name = name
        self.version = version
        self.retry = retry
        self.queue = queue
        self.schedule = schedule
        params = list(inspect.signature(fn).parameters.values())
        self.takes_input = len(params) >= 2
        hints = typing.get_type_hints(fn) if self.takes_input else {}
        self.input_type: Any = hints.get(params[1].name, Any) if self.takes_input else Any
        self.output_type: Any = _return_type(fn)

    def __repr__(self) -> str:
        return f"<Workflow {self.name}@{self.version}>"

    def parse_input(self, value: Any) -> Any:
        """Stored (or given) input as the function's declared input type."""
        return validate(self.input_type, value, f"input of workflow {self.name!r}")

    def new_run(
        self,
        input: Any,
        *,
        idempotency_key: str | None = None,
        available_at: datetime | str | None = None,
        deadline_at: datetime | str | None = None,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        parent_close: str = "cancel",
        concurrency_key: str | None = None,
        priority: int = 0,
    ) -> NewRun:
        """Validate and encode a start request (nothing is written)."""
        if self.queue is not None:
            self.queue.check_start(self.name, concurrency_key, priority)
        else:
            check_unqueued(self.name, concurrency_key, priority)
        if self.takes_input:
            value = self.parse_input(input)
        elif input is not None:
            raise InvalidInput(f"workflow {self.name!r} takes no input")
        else:
            value = None
        return NewRun(
            workflow=self.name,
            version=self.version,
            input_json=encode(value, f"input of workflow {self.name!r}", self.app.max_payload),
            max_attempts=self.retry.max_attempts,
            idempotency_key=idempotency_key,
            available_at=self._instant(available_at),
            deadline_at=self._instant(deadline_at),
            parent_run_id=parent_run_id,
            run_id=run_id,
            parent_close=parent_close,
            queue=self.queue.name if self.queue is not None else None,
            concurrency_key=concurrency_key,
            priority=priority,
        )

    def _instant(self, value: datetime | str | None) -> datetime | None:
        """An absolute time; "+5s" counts from the app's clock."""
        if value is None:
            return None
        return parse_instant(value, datetime.fromtimestamp(self.app.clock.time(), UTC))

    @overload
    async def start(
        self: Workflow[None, Out],
        input: None = None,
        *,
        idempotency_key: str | None = None,
        available_at: datetime | str | None = None,
        deadline_at: datetime | str | None = None,
        connection: Any = None,
        concurrency_key: str | None = None,
        priority: int = 0,
    ) -> RunHandle[Out]: ...

    @overload
    async def start(
        self,
        input: In,
        *,
        idempotency_key: str | None = None,
        available_at: datetime | str | None = None,
        deadline_at: datetime | str | None = None,
        connection: Any = None,
        concurrency_key: str | None = None,
        priority: int = 0,
    ) -> RunHandle[Out]: ...

    async def start(
        self,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        available_at: datetime | str | None = None,
        deadline_at: datetime | str | None = None,
        connection: Any = None,
        concurrency_key: str | None = None,
        priority: int = 0,
    ) -> RunHandle[Out]:
        """Start a run (or return the run this idempotency key already started).

        Args:
            input: validated against the function's input annotation.
            idempotency_key: same key and equal input return the existing run; a
                different input raises `IdempotencyConflictError`.
            available_at: do not run before this time (datetime, ISO text or "+5s").
            deadline_at: fail the run with `DeadlineExceeded` if it is not done by then.
            connection: the caller's open psycopg or sqlite3 connection: the run is
                written in its transaction (roll back and nothing was started).
            concurrency_key: the workflow's queue runs at most `per_key` runs sharing it.
            priority: the queue (declared with `priority=True`) claims larger first.

        Raises:
            InvalidInput: the input does not fit; nothing was written.
        """
        new = self.new_run(
            input, idempotency_key=idempotency_key, available_at=available_at,
            deadline_at=deadline_at, concurrency_key=concurrency_key, priority=priority,
        )  # fmt: skip
        run, _ = await self.app.create_run(new, connection)
        return RunHandle(self.app, run.run_id, run, output_type=self.output_type)

    def handle(self, run_id: str) -> RunHandle[Out]:
        """A handle on an existing run of this workflow (its result typed as `Out`)."""
        return RunHandle(self.app, run_id, output_type=self.output_type)


def _return_type(fn: Callable[..., Any]) -> Any:
    """The return annotation to validate a stored result into; Any (plain JSON) when
    there is none or pydantic cannot validate it (e.g. `typing.TypedDict` before
    Python 3.12, whose values are plain dicts anyway)."""
    try:
        ret: Any = typing.get_type_hints(fn).get("return", Any)
        ret = type(None) if ret is None else ret
        adapter(ret)
    except Exception:
        return Any
    return ret


class RunHandle(Generic[Out]):
    """A started run: ask its status, wait for its result, cancel it.

    `await handle.result()` is the run's output validated into the workflow's return
    annotation (a pydantic model, dataclass, TypedDict or builtin), so a
    `RunHandle[Done]` from `Workflow[Order, Done].start` gives a `Done`.
    """

    def __init__(
        self, app: Durably, run_id: str, run: Run | None = None, *, output_type: Any = Any
    ) -> None:
        self.app = app
        self.run_id = run_id
        self.run = run
        self.output_type = output_type

    def __repr__(self) -> str:
        return f"<RunHandle {self.run_id}>"

    async def get(self) -> Run:
        """The run as stored now."""
        self.run = await self.app.get_run(self.run_id)
        return self.run

    async def status(self) -> str:
        """The run's status now."""
        return (await self.get()).status

    async def cancel(self) -> Run:
        """Cancel the run (see `Durably.cancel`)."""
        return await self.app.cancel(self.run_id)

    async def wait(self, timeout: Duration | None = None) -> Run:
        """Wait until the run has ended (a canceled run: its compensations too); the run.

        Raises:
            WorkflowTimeoutError: `timeout` passed first.
        """
        with self.app.clock.awaiting_result():
            return await self._wait(timeout)

    async def _wait(self, timeout: Duration | None) -> Run:
        limit = parse_duration(timeout).total_seconds() if timeout is not None else None
        if limit is not None and limit <= 0:  # no waiting: the run as it is, once
            run = await self.get()
            if run.done:
                return run
            raise self._timed_out(limit, run)
        read: list[Run] = []  # the run as last read
        try:
            return await within(limit, self._until_done(read))
        except TimeUp:
            raise self._timed_out(limit or 0.0, read[-1] if read else None) from None

    def _timed_out(self, limit: float, run: Run | None) -> WorkflowTimeoutError:
        status = f"still {run.status}" if run else "not read yet"
        return WorkflowTimeoutError(f"run {self.run_id} is {status} after {limit}s")

    async def _until_done(self, read: list[Run]) -> Run:
        await self.app.open()  # before listening: a bad database fails here, as a read would
        async with self.app.end_watch.watching(self.run_id) as waiter:
            while True:
                read[:] = [await self.get()]
                if read[0].done:
                    return read[0]
                await waiter.wait(None)

    async def result(self, timeout: Duration | None = None) -> Out:
        """Wait for the run to finish; its output, as the workflow's return type.

        Raises:
            RunFailedError: the run failed or was canceled.
            WorkflowTimeoutError: `timeout` passed first.
            InvalidInput: the stored output does not fit the return annotation (the
                workflow's code changed since the run finished).
        """
        run = await self.wait(timeout)
        if run.status != "completed":
            raise RunFailedError(run.run_id, run.status, run.error)
        value: Out = validate(self.output_type, run.output, f"the output of run {run.run_id}")
        return value
