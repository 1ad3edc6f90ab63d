"""The durable step API a workflow sees as `ctx.step`.

Each method issues a command at once (it takes the workflow's next position, checked
against history) and returns an awaitable of its result. A command is data (`commands`):
the engine runs the lifecycle of its kind and delivers its result in log order. A step
that is issued but never awaited fails the run ("did you forget await?") as soon as its
awaitable is dropped, before anything issued after it starts; a step method called from
inside a step body fails it too. A child handle (`start_workflow`) may be left alone on purpose.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Coroutine, Generator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar, TypeVarTuple, overload

from ..core.attributes import check_attributes
from ..core.codec import adapter, encode
from ..core.durations import Duration, seconds_of
from ..core.errors import InvalidInput
from ..core.retry import STEP_DEFAULT, RetryPolicy
from ..store.requests import request_signal
from ..store.sends import check_signal_name
from .commands import (
    Body,
    Child,
    Command,
    Compensate,
    SetAttributes,
    SetEvent,
    SignalSend,
    SignalWait,
    Sleep,
    StepCall,
    StreamClose,
    StreamWrite,
    child_run_id,
    signature,
)
from .requests import Reply, Request
from .stepcontext import StepContext

if TYPE_CHECKING:
    from .definition import Definition
    from .runtime import Runtime

Until = Duration | datetime  # a child's timeout: how long, or until when
Ts = TypeVarTuple("Ts")
R = TypeVar("R")
T = TypeVar("T")
D = TypeVar("D")
Conn = TypeVar("Conn")  # the driver connection a transaction body receives
In = TypeVar("In")
Out = TypeVar("Out")
Out_co = TypeVar("Out_co", covariant=True)


class ChildHandle(Generic[Out_co]):
    """A child run started with `ctx.step.start_workflow`; await it for its result."""

    def __init__(self, run_id: str, call: StepCall[Out_co], cmd: Command) -> None:
        self._run_id = run_id
        self._call = call
        self._cmd = cmd

    @property
    def run_id(self) -> str:
        """The child's run id. Known at the call: the child at this position, the one an
        earlier attempt of the parent started included; only where a later attempt calls
        with another workflow or input (a new child) is it the new one's once started."""
        return self._cmd.child_run_id or self._run_id

    def __await__(self) -> Generator[Any, None, Out_co]:
        return self._call.__await__()

    async def result(self) -> Out_co:
        """The child's result (ChildWorkflowError if it failed, WorkflowTimeoutError)."""
        return await self._call


class StepApi:
    """Durable steps: each call is recorded once and replayed from history afterwards."""

    def __init__(self, run: Runtime) -> None:
        self._x = run
        self._closed_streams: set[str] = set()  # closed by this run's code, so far

    def _issue(
        self, name: str, kind: str, spec: Any = None, *, result_type: Any = Any,
        compensate: Callable[..., Any] | None = None, signal: str | None = None,
    ) -> Command:  # fmt: skip
        x = self._x

        def make(position: int) -> Command:
            return Command(
                position, name, kind, x.loop.create_future(), None, spec,
                result_type=result_type, compensate=compensate, signal=signal,
            )  # fmt: skip

        return x.issue(make, name, kind)

    # ---------------------------------------------------------------- function steps

    # A body may take a `StepContext` first (the engine passes it), and may be sync or
    # async; the overloads keep its positional parameters and its result type for the
    # caller. A TypeVarTuple, not a ParamSpec: PEP 612 allows no keyword-only options
    # (`retry=`, `timeout=`) between `*args: P.args` and `**kwargs: P.kwargs`. An async
    # body matches the sync overload too (`R` its coroutine); the async ones take a
    # `Coroutine` (not an `Awaitable`) so both see the body as the same type: else mypy
    # answers `Any` for a body with an `Any` parameter (a connection typed `Any`).
    @overload
    def run(
        self, name: str, fn: Callable[[StepContext, *Ts], Coroutine[Any, Any, R]],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> StepCall[R]: ...  # fmt: skip

    @overload
    def run(
        self, name: str, fn: Callable[[StepContext, *Ts], R],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> StepCall[R]: ...  # fmt: skip

    @overload
    def run(
        self, name: str, fn: Callable[[*Ts], Coroutine[Any, Any, R]],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> StepCall[R]: ...  # fmt: skip

    @overload
    def run(
        self, name: str, fn: Callable[[*Ts], R],
        *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None, timeout: Duration | None = None,
        **kwargs: Any,
    ) -> StepCall[R]: ...  # fmt: skip

    def run(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: *Ts,
        retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None,
        timeout: Duration | None = None,
        **kwargs: Any,
    ) -> StepCall[Any]:
        """Run `fn(*args, **kwargs)` once as step `name`; its result is recorded and replayed.

        Args:
            name: the step's name; checked against history on replay.
            fn: sync or async; sync bodies run in a thread. A first parameter annotated
                `StepContext` receives one.
            retry: the step's retry policy (default: 10 attempts, 1 s doubling to 100 s).
            compensate: `undo(result)`, run if the run is canceled or fails for good (or
                at `compensate()`), with the result as the workflow got it; at least once,
                as a body is (make it idempotent).
            timeout: cancel an attempt that runs longer (`StepTimeout`, retried by policy).

        A type checker holds `*args` to `fn`'s positional parameters and gives the call
        `fn`'s return type; the result is also validated into that annotation at run
        time. Keyword arguments pass through unchecked (for a required keyword-only
        parameter, use `functools.partial`).
        """
        sig = signature(fn)
        body = Body(
            fn, args, kwargs, retry or STEP_DEFAULT, _seconds(timeout, f"step {name!r}"), sig
        )
        cmd = self._issue(name, "function", body, result_type=sig[1], compensate=compensate)
        return StepCall(cmd)

    # `compensate` takes the body's connection type and its result: `undo(conn, result)`.
    @overload
    def transaction(
        self, name: str, fn: Callable[[Conn, *Ts], Coroutine[Any, Any, R]], *args: *Ts,
        retry: RetryPolicy | None = None, compensate: Callable[[Conn, R], object] | None = None,
    ) -> StepCall[R]: ...  # fmt: skip

    @overload
    def transaction(
        self, name: str, fn: Callable[[Conn, *Ts], R], *args: *Ts,
        retry: RetryPolicy | None = None, compensate: Callable[[Conn, R], object] | None = None,
    ) -> StepCall[R]: ...  # fmt: skip

    def transaction(
        self, name: str, fn: Callable[..., Any], *args: *Ts, retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None,
    ) -> StepCall[Any]:  # fmt: skip
        """Run `fn(conn, *args)` in one database transaction with the step's record.

        The business writes and the step's result commit together, or neither does. The
        run is not locked while `fn` runs: the lease (same worker, same fence) is checked
        as the transaction opens, and again by the step's record, written in the same
        transaction once `fn` returns, which keeps a claim off the run until it commits. A
        run taken over meanwhile fails the attempt (`LeaseLostError`) and `fn`'s writes
        roll back; so does a transaction PostgreSQL ends for being idle as long as the
        lease (`fn` waiting on something else, its worker frozen or cut off).

        The engine ends the transaction: `fn` ending it (`commit()`, `rollback()`,
        `close()`, SQLite's `with conn:`, a `COMMIT` of its own) fails the attempt, retried
        by `retry`. `conn` is a psycopg `AsyncConnection` on PostgreSQL (write
        `async def fn`) and a `sqlite3.Connection` on SQLite. The result is validated into
        `fn`'s return annotation, as a `run` step's is.

        `compensate`: `undo(conn, result)`, run if the run is canceled or fails for good
        (or at `compensate()`), with the result as the workflow got it, as a transaction of
        its own on the same kind of connection, fenced like `fn`, its record committed with
        its writes: exactly once, even when its worker is killed in the middle of it.
        """
        body = Body(fn, args, {}, retry or STEP_DEFAULT)
        cmd = self._issue(
            name, "transaction", body, result_type=signature(fn)[1], compensate=compensate
        )
        return StepCall(cmd)

    # ---------------------------------------------------------------- sagas

    def compensate(self) -> StepCall[list[str]]:
        """Undo now: run the undo (`compensate=`) of every step that completed before this
        call and was not undone yet, newest first, each once, as durable steps; the names
        of the steps undone, newest first.

        The workflow goes on afterwards and may return normally (a rejected order that
        releases its stock and refunds its payment, then returns). A step undone here is
        never undone again: not by a later `compensate()`, nor when the run is canceled or
        fails. "Before this call" is what the workflow had received when it called: a step
        still running beside it (`gather`) is not undone by it. The names are the same on
        replay and when a worker died in the middle of it (the undos it had completed are
        not run again). A cancel, a retry or a drain waits for it: undos are not interrupted.

        Raises:
            StepFailedError: an undo failed for good (after 10 attempts); the others ran.
                It is tried again if the run is canceled or fails.
        """
        spec = Compensate(self._x.received())
        return StepCall(self._issue("compensate", "compensate", spec))

    # ---------------------------------------------------------------- waits

    def sleep(self, name: str, duration: Duration) -> StepCall[None]:
        """Sleep durably: the run parks and no worker is held until `duration` has passed."""
        spec = Sleep(seconds_of(duration, f"step {name!r}"))
        return StepCall(self._issue(name, "sleep", spec))

    # Typed by `type=`: its instance; `| None` (or `| D`, the type of `default`) only when
    # a timeout can end the wait. A `type` that is no class (a union, `list[int]`) is
    # validated just the same, and typed `Any`.
    @overload
    def wait_for_signal(
        self, signal: str, *, type: builtins.type[T], timeout: None = None,
        name: str | None = None,
    ) -> StepCall[T]: ...  # fmt: skip

    @overload
    def wait_for_signal(
        self, signal: str, *, type: builtins.type[T], timeout: Duration,
        name: str | None = None,
    ) -> StepCall[T | None]: ...  # fmt: skip

    @overload
    def wait_for_signal(
        self, signal: str, *, type: builtins.type[T], timeout: Duration, default: D,
        name: str | None = None,
    ) -> StepCall[T | D]: ...  # fmt: skip

    @overload
    def wait_for_signal(
        self, signal: str, *, type: Any = Any, timeout: Duration | None = None,
        default: Any = None, name: str | None = None,
    ) -> StepCall[Any]: ...  # fmt: skip

    def wait_for_signal(
        self, signal: str, *, type: Any = Any, timeout: Duration | None = None,
        default: Any = None, name: str | None = None,
    ) -> StepCall[Any]:  # fmt: skip
        """Wait durably for signal `signal`; its data.

        A signal sent before this wait began was buffered and is received at once.

        Args:
            signal: the signal's name.
            type: what the data is validated into, as a workflow's input is (a pydantic
                model, a dataclass, a TypedDict, a builtin, anything pydantic's
                `TypeAdapter` takes); the wait then returns an instance of it, on replay
                too. Data that does not fit raises `InvalidInput` at the wait, naming the
                signal and the field. Default: the data as JSON decodes it.
            timeout: stop waiting after this long.
            default: what the wait returns when `timeout` passes first (None unless
                given). A signal sent with null data is None, never `default`: pass
                one to tell the two apart.
            name: the step's name in the run's history (default: `signal`).

        Example:
            ```python
            approval = await ctx.step.wait_for_signal(
                f"approval:{order.id}", type=Approval, timeout="2 days"
            )
            if approval is None:  # two days passed (the type is `Approval | None`)
                ...
            ```
        """
        check_signal_name(signal)
        if type is not Any:
            try:
                adapter(type)
            except Exception as exc:  # not a type pydantic can validate into
                raise TypeError(
                    f"wait_for_signal({signal!r}): type={type!r} is not a type pydantic can "
                    f"validate data into: {exc}"
                ) from None
        wait_s = _seconds(timeout, f"the wait for signal {signal!r}")
        spec = SignalWait(signal, wait_s, default)
        return StepCall(self._issue(name or signal, "signal-wait", spec, result_type=type,
                                    signal=signal))  # fmt: skip

    def send_signal(
        self, signal: str, data: Any = None, *, idempotency_key: str | None = None,
        run_id: str | None = None, name: str | None = None, expires: Duration | None = None,
    ) -> StepCall[dict[str, Any]]:  # fmt: skip
        """Send a signal once, as a recorded step; the §4.3 result. A buffered signal past
        `expires` is never delivered (as `Durably.send_signal`)."""
        check_signal_name(signal)
        data_json = encode(
            data, f"the data of signal {signal!r}", self._x.max_payload, self._x.codec
        )
        expires_s = _seconds(expires, f"the expiry of signal {signal!r}")
        spec = SignalSend(signal, data_json, idempotency_key, run_id, expires_s)
        return StepCall(self._issue(name or f"send:{signal}", "signal-send", spec))

    # ---------------------------------------------------------------- requests

    def wait_for_request(
        self, name: str, *, timeout: Duration | None = None
    ) -> StepCall[Request | None]:
        """Wait durably for a request sent to this run as `name` (`app.request`); the
        oldest one buffered if some came before the wait (FIFO). None once `timeout` has
        passed. Answer it with `reply` or `reject`: the client waits for that.

        Example:
            ```python
            req = await ctx.step.wait_for_request("approve")
            if req.data["amount"] > 100:
                await ctx.step.reject(req, "too much")
            else:
                await ctx.step.reply(req, {"approved": True})
            ```
        """
        check_signal_name(name)
        signal = request_signal(name)
        spec = SignalWait(signal, _seconds(timeout, f"the wait for request {name!r}"))
        return StepCall(self._issue(f"request:{name}", "signal-wait", spec,
                                    result_type=Request, signal=signal))  # fmt: skip

    def reply(self, request: Request, value: Any = None) -> StepCall[None]:
        """Answer `request` with `value`, once (a recorded step; replay never answers again)."""
        answer = self._x.encode(value, f"the answer to request {request.name!r}")
        spec = Reply(request.id, "answered", answer, None)
        return StepCall(self._issue(f"reply:{request.name}", "reply", spec))

    def reject(self, request: Request, reason: str) -> StepCall[None]:
        """Refuse `request`: the client's `app.request` raises `RequestRejected(reason)`."""
        spec = Reply(request.id, "rejected", None, str(reason))
        return StepCall(self._issue(f"reply:{request.name}", "reply", spec))

    # ---------------------------------------------------------------- events

    def set_event(self, key: str, value: Any) -> StepCall[None]:
        """Publish `value` as the run's event `key` (durable; the latest value wins).
        Clients read it with `Durably.get_event(run_id, key)`, which waits for the first.
        """
        value_json = self._x.encode(value, f"the value of event {key!r}")
        return StepCall(self._issue(key, "event", SetEvent(value_json)))

    def set_attributes(self, attributes: Mapping[str, Any]) -> StepCall[None]:
        """Merge `attributes` into the run's search attributes (durable, once: a replay
        sets nothing again); `app.list_runs(attributes=...)` finds the run by them. Each
        key's latest value wins. Values are str, int, float or bool (InvalidInput, before
        anything is issued, for others); never encrypted.
        """
        checked = check_attributes(attributes, "ctx.step.set_attributes")
        if not checked:
            raise InvalidInput("ctx.step.set_attributes needs at least one attribute")
        attributes_json = self._x.encode(checked, "the attributes")
        return StepCall(self._issue("set_attributes", "attributes", SetAttributes(attributes_json)))

    # ---------------------------------------------------------------- streams

    def write_stream(self, key: str, value: Any) -> StepCall[int]:
        """Append `value` to the run's stream `key`; its offset (0, 1, ... per key).

        Durable and exactly once: the value and the step's record commit together, and a
        replay writes nothing. Clients follow it with `Durably.read_stream(run_id, key)`.
        A closed stream takes no more (InvalidInput); every stream closes when the run ends.
        """
        check_stream_key(key)
        if key in self._closed_streams:
            raise InvalidInput(f"stream {key!r} is closed: it takes no more values")
        value_json = self._x.encode(value, f"the value written to stream {key!r}")
        return StepCall(self._issue(key, "stream", StreamWrite(key, value_json)))

    def close_stream(self, key: str) -> StepCall[None]:
        """Close the run's stream `key`: its readers stop once they have read all of it."""
        check_stream_key(key)
        self._closed_streams.add(key)
        return StepCall(self._issue(f"close:{key}", "stream", StreamClose(key)))

    # ---------------------------------------------------------------- children

    @overload
    def run_workflow(
        self, workflow: Definition[None, Out], input: None = None, *,
        timeout: Until | None = None, name: str | None = None, on_parent_close: str = "cancel",
    ) -> StepCall[Out]: ...  # fmt: skip

    @overload
    def run_workflow(
        self, workflow: Definition[In, Out], input: In, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> StepCall[Out]: ...  # fmt: skip

    def run_workflow(
        self, workflow: Definition[Any, Any], input: Any = None, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> StepCall[Any]:  # fmt: skip
        """Start `workflow` as a child and wait durably for its result.

        Args:
            timeout: how long to wait (a duration), or until when (an aware datetime).
            on_parent_close: "cancel" (default) cancels the child when this run ends
                (cancel, deadline, failure) before it; "abandon" lets it run on.

        Raises:
            ChildWorkflowError: the child failed or was canceled.
            WorkflowTimeoutError: `timeout` passed first (the child is canceled).

        The result is validated into the child workflow's return annotation.
        """
        return self._child(workflow, input, timeout, name, on_parent_close)._call

    @overload
    def start_workflow(
        self, workflow: Definition[None, Out], input: None = None, *,
        timeout: Until | None = None, name: str | None = None, on_parent_close: str = "cancel",
    ) -> ChildHandle[Out]: ...  # fmt: skip

    @overload
    def start_workflow(
        self, workflow: Definition[In, Out], input: In, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> ChildHandle[Out]: ...  # fmt: skip

    def start_workflow(
        self, workflow: Definition[Any, Any], input: Any = None, *, timeout: Until | None = None,
        name: str | None = None, on_parent_close: str = "cancel",
    ) -> ChildHandle[Any]:  # fmt: skip
        """Start `workflow` as a child now; await the returned handle for its result later.

        Children started in one pass of the workflow (e.g. a loop, or `gather`) all start
        at once.
        """
        handle = self._child(workflow, input, timeout, name, on_parent_close)
        handle._call._cmd.awaited = True  # a handle may be left alone on purpose
        return handle

    def _child(
        self, workflow: Definition[Any, Any], input: Any, timeout: Until | None,
        name: str | None, on_parent_close: str,
    ) -> ChildHandle[Any]:  # fmt: skip
        if on_parent_close not in ("cancel", "abandon"):
            raise ValueError("on_parent_close must be 'cancel' or 'abandon'")
        what = f"the timeout of child {name or workflow.name!r}"
        if isinstance(timeout, datetime):  # absolute: the lifecycle counts from its start
            if timeout.tzinfo is None:
                raise InvalidInput(f"{what}: a datetime needs a time zone: {timeout!r}")
            spec = Child(workflow, input, None, on_parent_close, deadline=timeout)
        else:
            spec = Child(workflow, input, _seconds(timeout, what), on_parent_close)
        result_type = Any if workflow.output_type is type(None) else workflow.output_type
        cmd = self._issue(name or f"child:{workflow.name}", "child", spec, result_type=result_type)
        rec = cmd.recorded
        child_id = (rec.child_run_id if rec is not None else None) or (
            self._x.history.child_at(cmd.position) or child_run_id(self._x.run_id, cmd.position)
        )
        return ChildHandle(child_id, StepCall(cmd), cmd)


def check_stream_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"a stream key is a non-empty string, not {key!r}")


def _seconds(duration: Duration | None, what: str) -> float | None:
    return seconds_of(duration, what) if duration is not None else None
