"""What a sync workflow (a plain `def`) is handed: `SyncWorkflowContext`, whose step
methods return results instead of awaitables.

Each method issues the same durable step as its async twin in `steps`, on the workflow
loop, and blocks the workflow's thread until the result is delivered (see `_syncflow`).
Steps run one at a time: there is no `gather`; children started with `start_workflow`
run concurrently and are waited for with `handle.result()`.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, TypeVarTuple, overload

from ..core.durations import Duration
from ..core.errors import WorkflowMisuseError
from ..core.retry import RetryPolicy
from . import values
from .continues import continue_as_new
from .patching import deprecate_patch, patched
from .requests import Request
from .stepcontext import StepContext
from .steps import ChildHandle, StepApi, Until
from .syncflow import SyncDriver

if TYPE_CHECKING:
    from .definition import Definition

Ts = TypeVarTuple("Ts")
R = TypeVar("R")
T = TypeVar("T")
D = TypeVar("D")
Conn = TypeVar("Conn")
In = TypeVar("In")
Out = TypeVar("Out")
Out_co = TypeVar("Out_co", covariant=True)


class SyncChildHandle(Generic[Out_co]):
    """A child run started with `ctx.step.start_workflow` in a sync workflow."""

    def __init__(self, handle: ChildHandle[Out_co], driver: SyncDriver) -> None:
        self._handle = handle
        self._driver = driver

    @property
    def run_id(self) -> str:
        """The child's run id (see `ChildHandle.run_id`)."""
        return self._handle.run_id

    def result(self) -> Out_co:
        """Wait durably for the child; its result (ChildWorkflowError if it failed)."""
        return self._driver.call(self._handle.result, "a child handle's result()")


class SyncStepApi:
    """Durable steps for sync workflows: each call blocks until its result is known.

    The same steps, names, options and history as `ctx.step` of an `async def` workflow
    (a workflow can move between the two without breaking its runs' replay).
    """

    def __init__(self, steps: StepApi, driver: SyncDriver) -> None:
        self._steps = steps
        self._driver = driver

    # As `StepApi`'s: a `Coroutine` for async bodies keeps a body with `Any` parameters typed.
    @overload
    def run(
        self, name: str, fn: Callable[[StepContext, *Ts], Coroutine[Any, Any, R]],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> R: ...  # fmt: skip

    @overload
    def run(
        self, name: str, fn: Callable[[StepContext, *Ts], R],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> R: ...  # fmt: skip

    @overload
    def run(
        self, name: str, fn: Callable[[*Ts], Coroutine[Any, Any, R]],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> R: ...  # fmt: skip

    @overload
    def run(
        self, name: str, fn: Callable[[*Ts], R],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> R: ...  # fmt: skip

    def run(
        self, name: str, fn: Callable[..., Any], *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> Any:  # fmt: skip
        """Run `fn(*args, **kwargs)` once as step `name`; its result (see `StepApi.run`)."""
        steps: Any = self._steps  # `fn`'s types were checked by this method's overloads
        return self._call(
            lambda: steps.run(
                name, fn, *args, retry=retry, compensate=compensate, timeout=timeout, **kwargs
            ),
            "ctx.step.run",
        )

    @overload
    def transaction(
        self, name: str, fn: Callable[[Conn, *Ts], Coroutine[Any, Any, R]], *args: *Ts,
        retry: RetryPolicy | None = None, compensate: Callable[[Conn, R], object] | None = None,
    ) -> R: ...  # fmt: skip

    @overload
    def transaction(
        self, name: str, fn: Callable[[Conn, *Ts], R], *args: *Ts,
        retry: RetryPolicy | None = None, compensate: Callable[[Conn, R], object] | None = None,
    ) -> R: ...  # fmt: skip

    def transaction(
        self, name: str, fn: Callable[..., Any], *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None,
    ) -> Any:  # fmt: skip
        """Run `fn(conn, *args)` in one database transaction with the step's record (see
        `StepApi.transaction`, and its `compensate`)."""
        steps: Any = self._steps  # `fn`'s types were checked by this method's overloads
        return self._call(
            lambda: steps.transaction(name, fn, *args, retry=retry, compensate=compensate),
            "ctx.step.transaction",
        )

    def compensate(self) -> list[str]:
        """Undo now the steps completed so far that have an undo (see `StepApi.compensate`);
        the names of the steps undone, newest first."""
        return self._call(self._steps.compensate, "ctx.step.compensate")

    def sleep(self, name: str, duration: Duration) -> None:
        """Sleep durably: the run parks and no worker is held until `duration` has passed."""
        self._call(lambda: self._steps.sleep(name, duration), "ctx.step.sleep")

    # As `StepApi.wait_for_signal`'s.
    @overload
    def wait_for_signal(
        self, signal: str, *, type: builtins.type[T], timeout: None = None,
        name: str | None = None,
    ) -> T: ...  # fmt: skip

    @overload
    def wait_for_signal(
        self, signal: str, *, type: builtins.type[T], timeout: Duration,
        name: str | None = None,
    ) -> T | None: ...  # fmt: skip

    @overload
    def wait_for_signal(
        self, signal: str, *, type: builtins.type[T], timeout: Duration, default: D,
        name: str | None = None,
    ) -> T | D: ...  # fmt: skip

    @overload
    def wait_for_signal(
        self, signal: str, *, type: Any = Any, timeout: Duration | None = None,
        default: Any = None, name: str | None = None,
    ) -> Any: ...  # fmt: skip

    def wait_for_signal(
        self, signal: str, *, type: Any = Any, timeout: Duration | None = None,
        default: Any = None, name: str | None = None,
    ) -> Any:  # fmt: skip
        """Wait durably for signal `signal`; its data, validated into `type`, or `default`
        once `timeout` has passed (see `StepApi.wait_for_signal`)."""
        steps: Any = self._steps  # the types were checked by this method's overloads
        return self._call(
            lambda: steps.wait_for_signal(
                signal, type=type, timeout=timeout, default=default, name=name
            ),
            "ctx.step.wait_for_signal",
        )

    def send_signal(
        self, signal: str, data: Any = None, *, idempotency_key: str | None = None,
        run_id: str | None = None, name: str | None = None, expires: Duration | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Send a signal once, as a recorded step; the §4.3 result."""
        return self._call(
            lambda: self._steps.send_signal(
                signal,
                data,
                idempotency_key=idempotency_key,
                run_id=run_id,
                name=name,
                expires=expires,
            ),
            "ctx.step.send_signal",
        )

    # As `StepApi`'s requests (SPEC §4.22).
    def wait_for_request(self, name: str, *, timeout: Duration | None = None) -> Request | None:
        """Wait durably for a request sent as `name`; None once `timeout` has passed."""
        return self._call(
            lambda: self._steps.wait_for_request(name, timeout=timeout),
            "ctx.step.wait_for_request",
        )

    def reply(self, request: Request, value: Any = None) -> None:
        """Answer `request` with `value`, once."""
        self._call(lambda: self._steps.reply(request, value), "ctx.step.reply")

    def reject(self, request: Request, reason: str) -> None:
        """Refuse `request`: the client raises `RequestRejected(reason)`."""
        self._call(lambda: self._steps.reject(request, reason), "ctx.step.reject")

    def set_event(self, key: str, value: Any) -> None:
        """Publish `value` as the run's event `key` (durable; the latest value wins)."""
        self._call(lambda: self._steps.set_event(key, value), "ctx.step.set_event")

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Merge `attributes` into the run's search attributes (durable, once)."""
        self._call(lambda: self._steps.set_attributes(attributes), "ctx.step.set_attributes")

    def write_stream(self, key: str, value: Any) -> int:
        """Append `value` to the run's stream `key` (durable, exactly once); its offset."""
        return self._call(lambda: self._steps.write_stream(key, value), "ctx.step.write_stream")

    def close_stream(self, key: str) -> None:
        """Close the run's stream `key` (every stream closes when the run ends)."""
        self._call(lambda: self._steps.close_stream(key), "ctx.step.close_stream")

    @overload
    def run_workflow(
        self, workflow: Definition[None, Out], input: None = None, *,
        timeout: Until | None = None, name: str | None = None, on_parent_close: str = "cancel",
    ) -> Out: ...  # fmt: skip

    @overload
    def run_workflow(
        self, workflow: Definition[In, Out], input: In, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> Out: ...  # fmt: skip

    def run_workflow(
        self, workflow: Definition[Any, Any], input: Any = None, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> Any:  # fmt: skip
        """Start `workflow` as a child and wait durably for its result (see
        `StepApi.run_workflow`)."""
        return self._call(
            lambda: self._steps.run_workflow(
                workflow, input, timeout=timeout, name=name, on_parent_close=on_parent_close
            ),
            "ctx.step.run_workflow",
        )

    @overload
    def start_workflow(
        self, workflow: Definition[None, Out], input: None = None, *,
        timeout: Until | None = None, name: str | None = None, on_parent_close: str = "cancel",
    ) -> SyncChildHandle[Out]: ...  # fmt: skip

    @overload
    def start_workflow(
        self, workflow: Definition[In, Out], input: In, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> SyncChildHandle[Out]: ...  # fmt: skip

    def start_workflow(
        self, workflow: Definition[Any, Any], input: Any = None, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> SyncChildHandle[Any]:  # fmt: skip
        """Start `workflow` as a child now; `handle.result()` waits for it later.

        Children started one after another, with no step waited for in between, all
        start at once.
        """

        async def start() -> ChildHandle[Any]:
            return self._steps.start_workflow(
                workflow, input, timeout=timeout, name=name, on_parent_close=on_parent_close
            )

        return SyncChildHandle(self._call(start, "ctx.step.start_workflow"), self._driver)

    def _call(self, request: Callable[[], Awaitable[R]], what: str) -> R:
        return self._driver.call(request, what)


@dataclass(frozen=True, eq=False)
class SyncWorkflowContext:
    """Handed to a sync workflow (a plain `def`) as its first argument.

    Its steps block until their result is known, and run one at a time. Workflow code
    runs in a thread of its own, in lockstep with the engine (it replays exactly as an
    `async def` workflow that awaits each step in turn); it must not block either.

    Example:
        ```python
        @app.workflow(name="ship", version="v1")
        def ship(ctx: SyncWorkflowContext, order: Order) -> Receipt:
            label = ctx.step.run("label", print_label, order)
            ctx.step.sleep("cool-off", "1 day")
            return ctx.step.run("send", send, order, label)
        ```

    Attributes:
        run_id: the run being executed.
        workflow: the workflow's name.
        version: the workflow's version.
        attempt: the workflow attempt (1 until a workflow-level retry).
        step: the durable step API; each method returns its step's result.
        input, created_at, started_at: as `WorkflowContext`'s (all read-only).
    """

    run_id: str
    workflow: str
    version: str
    attempt: int
    step: SyncStepApi
    input: Any = None
    created_at: datetime | None = None
    started_at: datetime | None = None

    def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this run and start the next run of its chain with `input`: see
        `WorkflowContext.continue_as_new`."""
        continue_as_new(input)

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the code path added by patch `patch_id` (see
        `WorkflowContext.patched`)."""
        steps = self.step._steps
        taken: bool = self.step._call(lambda: patched(steps, patch_id), "ctx.patched")
        return taken

    def now(self) -> datetime:
        """The current time, aware, in UTC, recorded and replayed: see
        `WorkflowContext.now`."""
        return self._value(values.now, "ctx.now")

    def random(self) -> float:
        """A random float in [0.0, 1.0), recorded and replayed: see `WorkflowContext.random`."""
        return self._value(values.random, "ctx.random")

    def uuid4(self) -> uuid.UUID:
        """A random UUID (version 4), recorded and replayed: see `WorkflowContext.uuid4`."""
        return self._value(values.uuid4, "ctx.uuid4")

    def _value(self, read: Callable[[StepApi], R], what: str) -> R:
        steps = self.step._steps

        async def on_the_loop() -> R:  # values are read where steps are issued
            return read(steps)

        return self.step._call(on_the_loop, what)

    def deprecate_patch(self, patch_id: str) -> None:
        """The cleanup of patch `patch_id` (see `WorkflowContext.deprecate_patch`)."""
        steps = self.step._steps
        self.step._call(lambda: deprecate_patch(steps, patch_id), "ctx.deprecate_patch")

    def gather(self, *aws: object, **kwargs: object) -> NoReturn:
        """Refused: a sync workflow runs its steps one at a time."""
        self._concurrent("ctx.gather")

    def wait_first(self, *aws: object) -> NoReturn:
        """Refused: a sync workflow runs its steps one at a time."""
        self._concurrent("ctx.wait_first")

    def _concurrent(self, what: str) -> NoReturn:
        error = WorkflowMisuseError(
            f"{what} in a sync workflow: its steps run one at a time, each call returning "
            "its result; write the workflow as `async def` to run steps concurrently (or "
            "start children with ctx.step.start_workflow and wait with handle.result())"
        )
        x = self.step._steps._x

        async def refuse() -> NoReturn:  # on the workflow loop: the run fails
            x.poison(error)
            raise error

        self.step._call(refuse, what)
        raise error  # not reached: the call raises
