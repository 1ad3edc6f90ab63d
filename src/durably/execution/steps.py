"""What the engine does for each step the workflow issues: the step's lifecycle. Here:
function steps and transactions; compensations are in `compensations`, waits, signal
sends and children in `waits`, events in `events`, patch markers in `patching` (`kinds`
maps each kind to its).

Workflow code issues a `Command` (on the workflow loop) and awaits its future. The
execution then runs the command's lifecycle on the worker's loop: attempts of a body,
their records, retries, the start and end of a wait. A lifecycle ends in one of three
ways: it settles the command (a result or a final error, the next `seq` of the run's log:
see `runlog`), it leaves a `Wait` (a sleep, a
signal, a child, a retry back-off: the run parks on it), or it stops because the
execution stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..core import telemetry as _telemetry
from ..core.codec import decode
from ..core.errors import (
    NonRetryableError,
    StepFailedError,
    StepTimeout,
    describe,
    is_misuse,
    user_failure,
)
from ..core.retry import RetryPolicy
from ..store.records import PendingStep
from ..workflow.commands import Body, Command, Wait
from ..workflow.stepcontext import Fence, StepContext
from .claimed import Claimed, is_engine_failure
from .streams import body_writer

T = TypeVar("T")
log = logging.getLogger("durably.worker")


# ------------------------------------------------------------------ bodies


async def run_function(x: Claimed, cmd: Command, body: Body) -> None:
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
    await x.log.settle(cmd, PendingStep(
        cmd.position, attempt, cmd.name, cmd.kind, "completed", output_json=output,
        compensable=cmd.compensate is not None, elapsed_s=x.clock.monotonic() - began,
    ), value=decode(output))  # fmt: skip


def _cancelled() -> bool:
    """This lifecycle's task is being cancelled from outside (the event loop shutting down
    cancels every task, a body's and its lifecycle's alike): the engine's cancellation."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _backing_off(x: Claimed, cmd: Command) -> bool:
    """The last attempt failed and its retry is not due yet: wait for it (True)."""
    rec = cmd.recorded
    if rec is None or rec.status != "failed" or rec.wake_at is None or rec.wake_at <= x.now():
        return False
    cmd.wait = Wait(rec.wake_at, f"retry:{cmd.name}", retry=True, attempt=rec.attempt)
    return True


async def _begin(
    x: Claimed, cmd: Command, is_async: bool, spend: bool = True, wants_ctx: bool = False
) -> tuple[int, float, StartRecord]:
    if wants_ctx:  # the body gets the fence, which must not leave before the claim is durable
        await x.confirm_claim()
    attempt = x.new_attempt(cmd.position, spend)
    start = StartRecord(x, cmd.position, attempt, cmd.name, cmd.kind)
    if not is_async:
        await start.write()
    return attempt, x.clock.monotonic(), start


async def _invoke(
    x: Claimed, cmd: Command, body: Body, attempt: int, start: StartRecord | None = None,
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
            _loop=asyncio.get_running_loop(), _stream=body_writer(x),
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
    that ignores cancellation: the body is cancelled by `CommandTasks.interrupt_bodies`, never
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
    x: Claimed, cmd: Command, attempt: int, exc: Exception, policy: RetryPolicy, elapsed: float
) -> None:
    error = describe(exc)
    x.history.failed(cmd.position)
    failures = x.history.failures(cmd.position)
    final = isinstance(exc, NonRetryableError) or is_misuse(exc) or failures >= policy.max_attempts
    if final:
        log.warning("run %s: step %r failed for good after %d attempts: %s: %s",
                    x.run_id, cmd.name, failures, error["type"], error["message"])  # fmt: skip
        await x.log.settle(cmd, PendingStep(
            cmd.position, attempt, cmd.name, cmd.kind, "failed", error=error, final=True,
            elapsed_s=elapsed,
        ), error=StepFailedError(cmd.name, error, failures))  # fmt: skip
        return
    retry_at = x.now() + policy.delay(failures)
    log.info("run %s: step %r attempt %d failed (%s: %s); retrying at %s",
             x.run_id, cmd.name, attempt, error["type"], error["message"],
             retry_at.isoformat(timespec="seconds"))  # fmt: skip
    await x.log.record(PendingStep(
        cmd.position, attempt, cmd.name, cmd.kind, "failed", error=error, elapsed_s=elapsed,
        wake_at=retry_at,
    ))  # fmt: skip
    cmd.wait = Wait(retry_at, f"retry:{cmd.name}", retry=True, attempt=attempt)


# ------------------------------------------------------------------ transactions


async def run_transaction(x: Claimed, cmd: Command, body: Body) -> None:
    """`fn(conn, *args)` and the step's record in one transaction, with the lease checked."""
    if _backing_off(x, cmd):
        return
    attempt, began, _ = await _begin(x, cmd, True)
    seq = x.log.reserve()
    # The body's task, interrupted as any step body is (a cancel, a lost lease): its
    # transaction is rolled back at once, not when the execution's lifecycles end.
    # A sync body runs in the connection's thread on SQLite: contained there (StopIteration).
    is_async = inspect.iscoroutinefunction(body.fn)
    fn = body.fn if is_async else functools.partial(_contained_call, body.fn)
    task = asyncio.ensure_future(x.store.steps.transact(
        x.lease, x.lease_s, cmd.position, attempt, cmd.name, seq, fn, body.args,
        lambda value: x.encode(value, f"the result of step {cmd.name!r}"),
        compensable=cmd.compensate is not None,
    ))  # fmt: skip
    cmd.body = task
    if x.interrupting:  # halted while this attempt was being set up
        task.cancel()
    try:
        output = await task
    except asyncio.CancelledError as exc:
        x.log.unreserve(seq)
        if not (x.interrupting or _cancelled()):  # the body's own (a library leaked one)
            await _failed(x, cmd, attempt, RuntimeError(f"CancelledError: {exc}"), body.retry,
                          x.clock.monotonic() - began)  # fmt: skip
            return
        await x.record_canceled(cmd, attempt, x.clock.monotonic() - began)
        return
    except Exception as exc:
        x.log.unreserve(seq)
        if is_engine_failure(exc):
            raise
        await _failed(x, cmd, attempt, exc, body.retry, x.clock.monotonic() - began)
        return
    x.log.publish(seq, cmd, value=decode(output))


# ------------------------------------------------------------------ running rows


class StartRecord:
    """An attempt's `running` row.

    A sync body runs in a thread, usually long and doing I/O: its row is durable before it
    starts (`write`), so a kill at any point leaves an attempt to mark abandoned. An async
    body's row is written once the body first yields to the event loop, concurrently with
    it (`when_it_yields`); one that finishes without ever yielding cannot be caught in
    flight, so it is recorded by one write: its end.
    """

    def __init__(self, x: Claimed, pos: int, attempt: int, name: str, kind: str) -> None:
        self.write = functools.partial(
            x.store.steps.record_start, x.lease, pos, attempt, name, kind
        )
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
