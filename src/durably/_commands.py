"""What the engine does for each step the workflow issues: the step's lifecycle. Here:
commands themselves, function steps, transactions and compensations; waits, signal sends
and children are in `_waits`.

Workflow code issues a `Command` (on the workflow loop) and awaits its future. The
execution then runs the command's lifecycle on the worker's loop: attempts of a body,
their records, retries, the start and end of a wait. A lifecycle ends in one of three
ways: it settles the command (a result or a final error, the next `seq` of the run's log:
see `_runlog`), it leaves a `Wait` (a sleep, a
signal, a child, a retry back-off: the run parks on it), or it stops because the
execution stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import _telemetry
from ._codec import decode
from ._context import Fence, StepContext
from ._errors import (
    ChildWorkflowError,
    InvalidInput,
    NonRetryableError,
    StepFailedError,
    StepTimeout,
    WorkflowMisuseError,
    WorkflowTimeoutError,
    describe,
    user_failure,
)
from ._records import PendingStep
from ._replay import Recorded
from ._retry import STEP_DEFAULT, RetryPolicy

if TYPE_CHECKING:
    from ._execution import Execution

T = TypeVar("T")
log = logging.getLogger("durably.worker")


@dataclass
class Wait:
    """What a command waits for (the run parks on it), and how to take it up again."""

    wake_at: datetime | None
    label: str
    retry: bool = False
    attempt: int = 1
    child_run_id: str | None = None

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
    lifecycle: Callable[[Execution, Command], Awaitable[None]]
    result_type: Any = Any
    compensate: Callable[..., Any] | None = None
    signal: str | None = None  # the name a signal wait waits for
    awaited: bool = False
    dropped: Callable[[Command], None] | None = None  # its StepCall went, never awaited
    issuer: asyncio.Task[Any] | None = None  # the workflow's task that issued it
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
        self._cmd.awaited = True
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


def error_for(rec: Recorded) -> BaseException:
    """The exception a workflow receives for a step recorded as failed for good."""
    error = rec.error or {}
    if rec.kind == "child":
        return child_error(error)
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
    params = list(inspect.signature(fn).parameters.values())
    first = params[0] if params else None
    wants_ctx = first is not None and (
        hints.get(first.name) is StepContext or "StepContext" in str(first.annotation)
    )
    ret = hints.get("return", Any)
    if ret is type(None) or ret is None:
        ret = Any
    return wants_ctx, ret, inspect.iscoroutinefunction(fn)


# ------------------------------------------------------------------ bodies


@dataclass
class Body:
    """A function step's body and how to run and retry it."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    retry: RetryPolicy = STEP_DEFAULT
    timeout: float | None = None
    sig: tuple[bool, Any, bool] = (False, Any, True)


async def run_function(x: Execution, cmd: Command, body: Body) -> None:
    """Attempts of a function step until it completes or fails for good."""
    if _backing_off(x, cmd):
        return
    attempt, began, start = await _begin(x, cmd, body.sig[2], wants_ctx=body.sig[0])
    try:
        with _telemetry.step_span(cmd.name, cmd.kind, attempt):
            result = await _invoke(x, cmd, body, attempt, start)
        output = x.encode(result, f"the result of step {cmd.name!r}")
    except asyncio.CancelledError as exc:
        await start.settle()
        if not (x.interrupting or _cancelled()):  # the body's own (a library leaked one)
            await _failed(x, cmd, attempt, RuntimeError(f"CancelledError: {exc}"), body.retry,
                          x.clock.monotonic() - began)  # fmt: skip
            return
        await x.record_canceled(cmd, attempt, x.clock.monotonic() - began)
        return
    except Exception as exc:
        await start.settle()
        await _failed(x, cmd, attempt, exc, body.retry, x.clock.monotonic() - began)
        return
    await start.settle()
    await x.settle(cmd, PendingStep(
        cmd.position, attempt, cmd.name, cmd.kind, "completed", output_json=output,
        compensable=cmd.compensate is not None, elapsed_s=x.clock.monotonic() - began,
    ), value=decode(output))  # fmt: skip


def _cancelled() -> bool:
    """This lifecycle's task is being cancelled from outside (the event loop shutting down
    cancels every task, a body's and its lifecycle's alike): the engine's cancellation."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _backing_off(x: Execution, cmd: Command) -> bool:
    """The last attempt failed and its retry is not due yet: wait for it (True)."""
    rec = cmd.recorded
    if rec is None or rec.status != "failed" or rec.wake_at is None or rec.wake_at <= x.now():
        return False
    cmd.wait = Wait(rec.wake_at, f"retry:{cmd.name}", retry=True, attempt=rec.attempt)
    return True


async def _begin(
    x: Execution, cmd: Command, is_async: bool, spend: bool = True, wants_ctx: bool = False
) -> tuple[int, float, StartRecord]:
    if wants_ctx:  # the body gets the fence, which must not leave before the claim is durable
        await x.confirm_claim()
    attempt = x.new_attempt(cmd.position, spend)
    start = StartRecord(x, cmd.position, attempt, cmd.name, cmd.kind)
    if not is_async:
        await start.write()
    return attempt, x.clock.monotonic(), start


async def _invoke(
    x: Execution, cmd: Command, body: Body, attempt: int, start: StartRecord | None = None,
    interruptible: bool = True,
) -> Any:  # fmt: skip
    if interruptible and x.interrupting:  # halted while this attempt was being set up:
        raise asyncio.CancelledError  # never begun (a thread, once begun, runs to its end)
    wants_ctx, _, is_async = body.sig
    args = body.args
    if wants_ctx:
        sctx = StepContext(
            run_id=x.run_id, step=cmd.name, attempt=attempt,
            fence=Fence(x.run_id, x.lease.fence), _heartbeat=x.heartbeat,
            _loop=asyncio.get_running_loop(),
        )  # fmt: skip
        cmd.step_context = sctx
        args = (sctx, *args)
    loop = asyncio.get_running_loop()
    if is_async:
        task: asyncio.Future[Any] = loop.create_task(_contained(body.fn, *args, **body.kwargs))
        if start is not None:
            start.when_it_yields(task)
    else:
        call = functools.partial(_contained_call, body.fn, *args, **body.kwargs)
        task = loop.run_in_executor(x.threads, call)
    cmd.body, cmd.in_thread = task, not is_async
    try:
        if body.timeout is None:
            return await _outcome(task)
        try:
            return await asyncio.wait_for(task, body.timeout)
        except TimeoutError:
            raise StepTimeout(
                f"step {cmd.name!r} ran longer than its timeout of {body.timeout:g}s"
            ) from None
    finally:
        cmd.body = None
        if cmd.step_context is not None:
            cmd.step_context.cancelled.set()  # a sync body still running: tell it to stop
            cmd.step_context = None


async def _contained(fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
    """An async body, whose SystemExit (or any BaseException but cancellation) is a failure
    of its step: a task raising SystemExit or KeyboardInterrupt would stop the event loop.
    (The body's coroutine is made here: a task cancelled before it starts leaves none.)"""
    try:
        return await fn(*args, **kwargs)
    except BaseException as exc:
        failure = user_failure(exc)
        if failure is exc:
            raise
        raise failure from exc


def _contained_call(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """A sync body, in its thread: as `_contained`."""
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:
        failure = user_failure(exc)
        if failure is exc:
            raise
        raise failure from exc


async def _outcome(body: asyncio.Future[T]) -> T:
    """The body's outcome, as `await asyncio.shield(body)` gives it, at half the callbacks.

    The lifecycle cancelled (by the execution's end) stops waiting at once, even for a body
    that ignores cancellation: the body is cancelled by `Execution.interrupt_bodies`, never
    through this await, and its outcome is read when it ends (no "never retrieved").
    """
    waiter = asyncio.get_running_loop().create_future()

    def ended(_: object) -> None:
        if not body.cancelled():
            body.exception()
        if not waiter.done():
            waiter.set_result(None)

    body.add_done_callback(ended)
    await waiter
    return body.result()


async def _failed(
    x: Execution, cmd: Command, attempt: int, exc: Exception, policy: RetryPolicy, elapsed: float
) -> None:
    error = describe(exc)
    x.history.failed(cmd.position)
    failures = x.history.failures(cmd.position)
    final = isinstance(exc, NonRetryableError | InvalidInput) or failures >= policy.max_attempts
    if final:
        log.warning("run %s: step %r failed for good after %d attempts: %s: %s",
                    x.run_id, cmd.name, failures, error["type"], error["message"])  # fmt: skip
        await x.settle(cmd, PendingStep(
            cmd.position, attempt, cmd.name, cmd.kind, "failed", error=error, final=True,
            elapsed_s=elapsed,
        ), error=StepFailedError(cmd.name, error, failures))  # fmt: skip
        return
    retry_at = x.now() + policy.delay(failures)
    log.info("run %s: step %r attempt %d failed (%s: %s); retrying at %s",
             x.run_id, cmd.name, attempt, error["type"], error["message"],
             retry_at.isoformat(timespec="seconds"))  # fmt: skip
    await x.record(PendingStep(
        cmd.position, attempt, cmd.name, cmd.kind, "failed", error=error, elapsed_s=elapsed,
        wake_at=retry_at,
    ))  # fmt: skip
    cmd.wait = Wait(retry_at, f"retry:{cmd.name}", retry=True, attempt=attempt)


# ------------------------------------------------------------------ transactions


async def run_transaction(x: Execution, cmd: Command, body: Body) -> None:
    """`fn(conn, *args)` and the step's record in one transaction, with the lease checked."""
    if _backing_off(x, cmd):
        return
    attempt, began, _ = await _begin(x, cmd, True)
    seq = x.reserve()
    # The body's task, interrupted as any step body is (a cancel, a lost lease): its
    # transaction is rolled back at once, not when the execution's lifecycles end.
    # A sync body runs in the connection's thread on SQLite: contained there (StopIteration).
    is_async = inspect.iscoroutinefunction(body.fn)
    fn = body.fn if is_async else functools.partial(_contained_call, body.fn)
    task = asyncio.ensure_future(x.store.transact(
        x.lease, x.lease_s, cmd.position, attempt, cmd.name, seq, fn, body.args,
        lambda value: x.encode(value, f"the result of step {cmd.name!r}"),
    ))  # fmt: skip
    cmd.body = task
    if x.interrupting:  # halted while this attempt was being set up
        task.cancel()
    try:
        output = await task
    except asyncio.CancelledError as exc:
        x.unreserve(seq)
        if not (x.interrupting or _cancelled()):  # the body's own (a library leaked one)
            await _failed(x, cmd, attempt, RuntimeError(f"CancelledError: {exc}"), body.retry,
                          x.clock.monotonic() - began)  # fmt: skip
            return
        await x.record_canceled(cmd, attempt, x.clock.monotonic() - began)
        return
    except Exception as exc:
        x.unreserve(seq)
        if x.is_engine_failure(exc):
            raise
        await _failed(x, cmd, attempt, exc, body.retry, x.clock.monotonic() - began)
        return
    x.publish(seq, cmd, value=decode(output))


# ------------------------------------------------------------------ compensations


async def run_compensation(x: Execution, cmd: Command) -> None:
    """Run `cmd`'s undo once as a recorded step at -(p + 1); retries wait in place."""
    assert cmd.compensate is not None
    pos, name = -cmd.position - 1, f"compensate:{cmd.name}"
    comp = Command(pos, name, "function", cmd.future, None, run_compensation)
    body = Body(cmd.compensate, (cmd.value,), {}, sig=signature(cmd.compensate))
    while True:
        attempt, began, start = await _begin(
            x, comp, body.sig[2], spend=False, wants_ctx=body.sig[0]
        )
        try:
            try:
                await _invoke(x, comp, body, attempt, start, interruptible=False)
            except asyncio.CancelledError as cancel:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the engine's own: the execution stops
                    raise
                # An undo is never interrupted by the engine: this one is its own.
                raise RuntimeError(f"CancelledError: {cancel}") from cancel
        except Exception as exc:
            await start.settle()
            error = describe(exc)
            x.history.failed(pos)
            failures = x.history.failures(pos)
            final = isinstance(exc, NonRetryableError) or failures >= STEP_DEFAULT.max_attempts
            await x.record(PendingStep(
                pos, attempt, name, "function", "failed", error=error, final=final,
                elapsed_s=x.clock.monotonic() - began,
            ))  # fmt: skip
            if final:
                log.error("run %s: compensation %r failed for good: %s", x.run_id, name, error)
                return
            await asyncio.sleep(STEP_DEFAULT.delay(failures).total_seconds())
            continue
        await start.settle()
        await x.record(PendingStep(
            pos, attempt, name, "function", "completed", output_json="null",
            elapsed_s=x.clock.monotonic() - began,
        ))  # fmt: skip
        return


# ------------------------------------------------------------------ running rows


class StartRecord:
    """An attempt's `running` row.

    A sync body runs in a thread, usually long and doing I/O: its row is durable before it
    starts (`write`), so a kill at any point leaves an attempt to mark abandoned. An async
    body's row is written once the body first yields to the event loop, concurrently with
    it (`when_it_yields`); one that finishes without ever yielding cannot be caught in
    flight, so it is recorded by one write: its end.
    """

    def __init__(self, x: Execution, pos: int, attempt: int, name: str, kind: str) -> None:
        self.write = functools.partial(x.store.record_start, x.lease, pos, attempt, name, kind)
        self._task: asyncio.Task[Any] | None = None

    def when_it_yields(self, body: asyncio.Future[Any]) -> None:
        loop = asyncio.get_running_loop()

        def check() -> None:  # runs after the body's first step
            if not body.done():
                self._task = loop.create_task(self.write())

        loop.call_soon(check)

    async def settle(self) -> None:
        """Wait until the row is written, if it was sent."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
