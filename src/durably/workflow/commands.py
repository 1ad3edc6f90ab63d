"""Commands: what workflow code issues, as data. Each `ctx.step` call makes a `Command`
of a kind ("function", "transaction", "sleep", "signal-wait", "signal-send", "event",
"attributes", "stream", "child", "patch", "compensate") with the spec of what to do (a
`Body`, a `Sleep`, ...); the engine looks up the lifecycle of its kind (`execution.kinds`)
and runs it on the worker's loop. The workflow awaits the command's future, which the
engine resolves in log order.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..core.codec import validate
from ..core.errors import (
    ChildWorkflowError,
    StepFailedError,
    WorkflowMisuseError,
    WorkflowTimeoutError,
)
from ..core.retry import STEP_DEFAULT, RetryPolicy
from ..store.history import Recorded
from .stepcontext import StepContext

if TYPE_CHECKING:
    from .definition import Definition

T = TypeVar("T")
CHILD_NAMESPACE = uuid.UUID("0b5a3a5e-7d0e-4a53-9a43-2f6b0d1c9e11")


@dataclass
class Wait:
    """What a command waits for (the run parks on it), and how to take it up again."""

    wake_at: datetime | None
    label: str
    retry: bool = False
    attempt: int = 1
    child_run_id: str | None = None
    ended_by: str | None = None  # the child whose end ends it (and wakes the run: `park`)

    def resume(self, cmd: Command) -> Recorded:
        """What the command's lifecycle finds when it is taken up again in this claim."""
        return Recorded(
            position=cmd.position, attempt=self.attempt, step=cmd.name, kind=cmd.kind,
            status="failed" if self.retry else "running", final=False, compensable=False,
            signal=None, child_run_id=self.child_run_id, wake_at=self.wake_at, output=None,
            error=None,
        )  # fmt: skip


@dataclass(eq=False)
class Command:
    """One step the workflow issued, at `position` (the n-th it issued)."""

    position: int
    name: str
    kind: str
    future: asyncio.Future[Any]  # on the workflow loop
    recorded: Recorded | None  # what history held at this position when issued
    spec: Any = None  # what to do, by kind: a `Body`, `Sleep`, `SignalWait`, ...
    result_type: Any = Any
    compensate: Callable[..., Any] | None = None
    signal: str | None = None  # the name a signal wait waits for
    awaited: bool = False
    blocking: bool = False  # the workflow code awaits it (not only holds a child's handle)
    dropped: Callable[[Command], None] | None = None  # its StepCall went, never awaited
    issuer: asyncio.Task[Any] | None = None  # the workflow's task that issued it
    # The engine's bookkeeping of the command while it runs it (`execution`):
    gate: int = 0  # results up to this seq must be durable before the lifecycle starts
    recording: bool = False  # the outcome is known, its record is being written
    wait: Wait | None = None
    timer: asyncio.TimerHandle | None = None
    poked: bool = False  # taken up again because something may have arrived
    poke_kept: bool = False  # a poke found it busy: taken up when it waits again
    active: bool = False  # its lifecycle is running
    abandoned: bool = False  # the workflow stopped awaiting it
    body: asyncio.Future[Any] | None = None
    in_thread: bool = False  # `body` is a sync body's thread: it cannot be interrupted
    kept: bool = False  # such a body, left running by a release: its lifecycle is waited for
    step_context: StepContext | None = None
    value: Any = None
    settled: bool = False
    child_run_id: str | None = None  # a child's, once its lifecycle has named it


class StepCall(Generic[T]):
    """What a step method returns: await it (directly, or through gather/wait)."""

    __slots__ = ("_cmd",)

    def __init__(self, cmd: Command) -> None:
        self._cmd = cmd

    def __await__(self) -> Generator[Any, None, T]:
        self._cmd.awaited = self._cmd.blocking = True
        return (yield from self._cmd.future.__await__())  # type: ignore[no-any-return]

    def __del__(self) -> None:
        # A forgotten await: CPython drops the call's result right after its statement, as
        # it does an un-awaited coroutine's, so the workflow is told before its next step.
        cmd = self._cmd
        if not cmd.awaited and cmd.dropped is not None:
            cmd.dropped(cmd)

    def __repr__(self) -> str:
        return f"<step {self._cmd.name!r} at position {self._cmd.position}>"


def never_awaited(cmd: Command) -> WorkflowMisuseError:
    return WorkflowMisuseError(f"step {cmd.name!r} at position {cmd.position} was never "
                               "awaited: did you forget await?")  # fmt: skip


def cancelled_issuer(cmd: Command) -> bool:
    """The task that issued `cmd` was cancelled (a `wait_first` loser): what it held is let
    go of on purpose, as its own awaited futures are (as it unwinds, or later)."""
    task = cmd.issuer
    return task is not None and (task.cancelling() > 0 or task.cancelled())


def error_for(rec: Recorded) -> BaseException:
    """The exception a workflow receives for a step recorded as failed for good."""
    error = rec.error or {}
    if rec.kind == "child":
        return child_error(error)
    if rec.kind == "compensate":  # names the undo that failed, as it did live
        return StepFailedError(error.get("step", rec.step), error, error.get("attempts", 1))
    return StepFailedError(rec.step, error, rec.attempt)


def child_error(error: dict[str, Any]) -> Exception:
    if error.get("type") == "WorkflowTimeoutError":
        return WorkflowTimeoutError(error.get("message"))
    return ChildWorkflowError(
        error.get("child_run_id", "?"), error.get("status", "failed"), error.get("child_error")
    )


@functools.lru_cache(maxsize=1024)
def signature(fn: Callable[..., Any]) -> tuple[bool, Any, bool]:
    """(takes a StepContext first, return annotation or Any, is a coroutine function)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without one (`str`, `int`): no StepContext
        params = []
    first = params[0] if params else None
    wants_ctx = first is not None and (
        hints.get(first.name) is StepContext or "StepContext" in str(first.annotation)
    )
    ret = hints.get("return", Any)
    if ret is type(None) or ret is None:
        ret = Any
    return wants_ctx, ret, inspect.iscoroutinefunction(fn)


@dataclass
class Body:
    """A function step's body and how to run and retry it."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    retry: RetryPolicy = STEP_DEFAULT
    timeout: float | None = None
    sig: tuple[bool, Any, bool] = (False, Any, True)


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class SignalWait:
    signal: str
    timeout: float | None
    default: Any = None  # what the workflow receives when the timeout passes first


class _NoSignal:
    def __repr__(self) -> str:
        return "NO_SIGNAL"


# The outcome of a signal wait whose timeout passed first. Its record holds null, as one
# of a signal of null data does; it is told apart by the signal it does not hold
# (`Recorded.delivered`), and the workflow receives the wait's `default` in its place.
NO_SIGNAL: Any = _NoSignal()


def recorded_value(rec: Recorded) -> Any:
    """What a completed record hands back to the workflow on replay (before `typed`)."""
    if rec.kind in ("sleep", "attributes"):  # what was set is shown, not handed back
        return None
    if rec.kind == "signal-wait" and rec.output is None and not rec.delivered:
        return NO_SIGNAL
    return rec.output


def typed(cmd: Command, value: Any) -> Any:
    """`value`, the outcome of `cmd`, as the workflow receives it: validated into the
    command's result type (InvalidInput naming what did not fit); a timed-out signal
    wait's default."""
    if value is NO_SIGNAL:
        return cmd.spec.default if isinstance(cmd.spec, SignalWait) else None
    if cmd.result_type is Any:
        return value
    if cmd.kind == "signal-wait":
        return validate(cmd.result_type, value, f"the data of signal {cmd.signal!r}")
    return validate(cmd.result_type, value, f"the result of step {cmd.name!r}")


@dataclass(frozen=True)
class SignalSend:
    signal: str
    data_json: str
    key: str | None
    run_id: str | None
    expires_s: float | None


@dataclass(frozen=True)
class SetEvent:
    value_json: str


@dataclass(frozen=True)
class SetAttributes:
    """`ctx.step.set_attributes`: merge `attributes_json` into the run's attributes."""

    attributes_json: str


@dataclass(frozen=True)
class StreamWrite:
    """`ctx.step.write_stream`: append `value_json` to the run's stream `key`."""

    key: str
    value_json: str


@dataclass(frozen=True)
class StreamClose:
    """`ctx.step.close_stream`: the run's stream `key` takes no more values."""

    key: str


@dataclass(frozen=True)
class Compensate:
    """`ctx.step.compensate()`: undo the steps whose results the workflow had received,
    the log's entries up to `through` (the same on replay: results arrive in log order)."""

    through: int


@dataclass(frozen=True)
class Child:
    workflow: Definition[Any, Any]
    input: Any
    timeout: float | None  # seconds from its start
    on_parent_close: str
    deadline: datetime | None = None  # or an instant


def child_run_id(run_id: str, position: int, attempt: int = 1) -> str:
    """Deterministic: a replay that reaches the same call names the same child, and so does
    a later workflow attempt (see `_take_over`): the child is a function of the parent run
    and the position. Only a child replaced by one of other work takes the attempt too."""
    key = f"{run_id}/{position}" if attempt == 1 else f"{run_id}/{position}/{attempt}"
    return uuid.uuid5(CHILD_NAMESPACE, key).hex
