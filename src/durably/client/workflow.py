"""`Workflow`: a workflow's definition bound to the app it was registered on, which starts
its runs; and `WorkflowDecorator`, what makes one (`app.workflow(...)`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from ..core.attributes import Attributes
from ..core.durations import Duration
from ..core.retry import RetryPolicy
from ..workflow.definition import Definition, WorkflowFn
from ..workflow.queue import Queue
from ..workflow.schedule import Schedule
from .handle import Client, RunHandle

if TYPE_CHECKING:
    from ..workflow.context import WorkflowContext
    from ..workflow.syncsteps import SyncWorkflowContext

In = TypeVar("In", contravariant=True)
Out = TypeVar("Out", covariant=True)


class Workflow(Definition[In, Out]):
    """A registered workflow: `(name, version)` and its function (async, or sync).

    Created by `@app.workflow(...)`, which reads `In` and `Out` from the function's
    annotations: `async def f(ctx: WorkflowContext, order: Order) -> Done` makes a
    `Workflow[Order, Done]`, and a function without an input parameter a
    `Workflow[None, Done]`. Start runs with `await wf.start(input)`.
    """

    def __init__(
        self, app: Client, fn: WorkflowFn, name: str, version: str, retry: RetryPolicy,
        queue: Queue | None = None, schedule: Schedule | None = None,
    ) -> None:  # fmt: skip
        super().__init__(fn, name, version, retry, queue, schedule)
        self.app = app

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.app.clock.time(), UTC)

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
        debounce: Duration | None = None,
        debounce_key: str | None = None,
        debounce_max: Duration | None = None,
        attributes: Attributes | None = None,
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
        debounce: Duration | None = None,
        debounce_key: str | None = None,
        debounce_max: Duration | None = None,
        attributes: Attributes | None = None,
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
        debounce: Duration | None = None,
        debounce_key: str | None = None,
        debounce_max: Duration | None = None,
        attributes: Attributes | None = None,
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
            debounce=debounce, debounce_key=debounce_key, debounce_max=debounce_max,
            attributes=attributes,

        Raises:
            InvalidInput: the input does not fit, or the debounce options do not make a
                window (`debounce` with `idempotency_key` or `available_at` included);
                nothing was written.
        """
        new = self.new_run(
            input, max_payload=self.app.max_payload, codec=self.app.codec, now=self._now(),
            idempotency_key=idempotency_key, available_at=available_at,
            deadline_at=deadline_at, concurrency_key=concurrency_key, priority=priority,
            debounce=debounce, debounce_key=debounce_key, debounce_max=debounce_max,
            attributes=attributes,
        )  # fmt: skip
        run, created = await self.app.create_run(new, connection)
        joined = new.debounce is not None and not created
        return RunHandle(self.app, run.run_id, run, output_type=self.output_type, joined=joined)

    def handle(self, run_id: str) -> RunHandle[Out]:
        """A handle on an existing run of this workflow (its result typed as `Out`)."""
        return RunHandle(self.app, run_id, output_type=self.output_type)


class WorkflowDecorator(Protocol):
    """What `app.workflow(...)` returns: it turns a function into a typed workflow.

    `async def f(ctx: WorkflowContext) -> Out` gives `Workflow[None, Out]`;
    `async def f(ctx: WorkflowContext, input: In) -> Out` gives `Workflow[In, Out]`;
    a sync workflow, `def f(ctx: SyncWorkflowContext, input: In) -> Out`, the same.
    Annotate `ctx`: with `ctx: Any` a type checker cannot tell an async function from a
    sync one, and the workflow is typed `Any`.
    """

    @overload
    def __call__(
        self, fn: Callable[[WorkflowContext], Awaitable[Out]], /
    ) -> Workflow[None, Out]: ...

    @overload
    def __call__(
        self, fn: Callable[[WorkflowContext, In], Awaitable[Out]], /
    ) -> Workflow[In, Out]: ...

    @overload
    def __call__(self, fn: Callable[[SyncWorkflowContext], Out], /) -> Workflow[None, Out]: ...

    @overload
    def __call__(self, fn: Callable[[SyncWorkflowContext, In], Out], /) -> Workflow[In, Out]: ...
