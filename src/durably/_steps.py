"""The durable step API a workflow sees as `ctx.step`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import typing
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _telemetry
from ._codec import decode, validate
from ._context import Fence, StepContext
from ._durations import Duration, parse_duration
from ._errors import (
    ChildWorkflowError,
    InvalidInput,
    LeaseLostError,
    NonRetryableError,
    RunTerminalError,
    StepFailedError,
    WorkflowTimeoutError,
    describe,
)
from ._execution import CHILD_NAMESPACE, Compensation, StopReplay
from ._replay import Recorded
from ._retry import STEP_DEFAULT, RetryPolicy
from ._store import PendingStep

if TYPE_CHECKING:
    from ._execution import Execution
    from ._workflow import Workflow


@functools.lru_cache(maxsize=1024)
def _signature(fn: Callable[..., Any]) -> tuple[bool, Any, bool]:
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


class StepApi:
    """Durable steps: each call is recorded once and replayed from history afterwards."""

    def __init__(self, execution: Execution) -> None:
        self._x = execution

    # ---------------------------------------------------------------- function steps

    async def run(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run `fn(*args, **kwargs)` once as step `name`; its result is recorded and replayed.

        Args:
            name: the step's name; checked against history on replay.
            fn: sync or async; sync bodies run in a thread. A first parameter annotated
                `StepContext` receives one.
            retry: the step's retry policy (default: 10 attempts, 1 s doubling to 100 s).
            compensate: `undo(result)` run once if the run is canceled or fails for good.
        """
        x = self._x
        pos = x.next_position()
        rec = x.history.at(pos, name)
        replayed = self._replayed(rec, fn)
        if replayed is not _NOTHING:
            if compensate is not None:
                x.compensations.append(Compensation(pos, name, compensate, replayed))
            return replayed
        value = await self._execute(pos, name, "function", fn, args, kwargs, retry, compensate)
        if compensate is not None:
            x.compensations.append(Compensation(pos, name, compensate, value))
        return value

    def _replayed(self, rec: Recorded | None, fn: Callable[..., Any] | None) -> Any:
        if rec is None:
            if self._x.collect_only:
                raise StopReplay
            return _NOTHING
        if rec.completed:
            return self._typed(fn, rec.output)
        if rec.failed_for_good:
            raise StepFailedError(rec.step, rec.error or {})
        if self._x.collect_only:
            raise StopReplay
        return _NOTHING

    def _typed(self, fn: Callable[..., Any] | None, value: Any) -> Any:
        if fn is None:
            return value
        ret = _signature(fn)[1]
        return value if ret is Any else validate(ret, value, "a step result")

    async def _execute(
        self,
        pos: int,
        name: str,
        kind: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
        compensate: Callable[..., Any] | None,
        records_itself: bool = False,
        sig: tuple[bool, Any, bool] | None = None,
    ) -> Any:
        x = self._x
        await x.defer_if_parking()
        await x.flush()
        x.spend_attempt()
        attempt = x.history.next_attempt(pos)
        sig = sig or _signature(fn)
        x.in_flight += 1
        start = _StartRecord(x, pos, attempt, name, kind)
        began = x.clock.monotonic()
        try:
            try:
                await start.begin(is_async=sig[2])
                with _telemetry.step_span(name, kind, attempt):
                    result = await self._invoke(fn, sig, name, attempt, args, kwargs)
                output = x.encode(result, f"the result of step {name!r}")
            except LeaseLostError:
                await start.settle()
                raise
            except (Exception, asyncio.CancelledError) as exc:
                await start.settle()
                if isinstance(exc, asyncio.CancelledError):
                    await self._record_canceled(pos, attempt, name, kind, began)
                    raise
                final_error = await self._record_failure(
                    pos, attempt, name, kind, exc, retry or STEP_DEFAULT, began
                )
                if final_error is not None:
                    raise final_error from exc
                failure = exc
            else:
                await start.settle()
                if records_itself:
                    return result
                x.defer_record(PendingStep(
                    pos, attempt, name, kind, output, compensate is not None,
                    x.clock.monotonic() - began,
                ))  # fmt: skip
                return self._typed(fn, decode(output))
        finally:
            x.in_flight -= 1
            x.changed()
        policy = retry or STEP_DEFAULT
        delay = policy.delay(x.history.failures(pos) + 1)
        await x.suspend(x.now() + delay, f"retry:{name}", retry=True)
        raise AssertionError(failure)  # unreachable: suspend never returns

    async def _invoke(
        self,
        fn: Callable[..., Any],
        sig: tuple[bool, Any, bool],
        name: str,
        attempt: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        x = self._x
        wants_ctx, _, is_async = sig
        if wants_ctx:
            sctx = StepContext(
                run_id=x.run_id, step=name, attempt=attempt,
                fence=Fence(x.run_id, x.lease.fence), _heartbeat=x.heartbeat,
                _loop=asyncio.get_running_loop(),
            )  # fmt: skip
            x.step_contexts.add(sctx)
            args = (sctx, *args)
        try:
            if is_async:
                return await fn(*args, **kwargs)
            loop = asyncio.get_running_loop()
            call = functools.partial(fn, *args, **kwargs)
            return await loop.run_in_executor(x.threads, call)
        finally:
            if wants_ctx:
                x.step_contexts.discard(sctx)

    async def _record_failure(
        self,
        pos: int,
        attempt: int,
        name: str,
        kind: str,
        exc: BaseException,
        policy: RetryPolicy,
        began: float,
    ) -> StepFailedError | None:
        """Record a failed attempt; the error to raise if the step has failed for good."""
        x = self._x
        error = describe(exc)
        failures = x.history.failures(pos) + 1
        final = isinstance(exc, NonRetryableError | InvalidInput) or failures >= policy.max_attempts
        await x.store.record_finish(
            x.lease, pos, attempt, name, kind, "failed", error=error, final=final,
            elapsed_s=x.clock.monotonic() - began,
        )  # fmt: skip
        x.history.record(Recorded(
            position=pos, attempt=attempt, step=name, kind=kind, status="failed", final=final,
            compensable=False, signal=None, child_run_id=None, wake_at=None, output=None,
            error=error,
        ))  # fmt: skip
        return StepFailedError(name, error) if final else None

    async def _record_canceled(
        self, pos: int, attempt: int, name: str, kind: str, began: float
    ) -> None:
        x = self._x
        with contextlib.suppress(Exception):
            await asyncio.shield(x.store.record_finish(
                x.lease, pos, attempt, name, kind, "canceled",
                elapsed_s=x.clock.monotonic() - began,
            ))  # fmt: skip

    async def run_compensation(self, comp: Compensation) -> None:
        """Run one step's `undo` as a recorded step at position -(p + 1)."""
        pos = -comp.position - 1
        name = f"compensate:{comp.step}"
        await self._execute(pos, name, "function", comp.undo, (comp.value,), {}, None, None)

    # ---------------------------------------------------------------- transactions

    async def transaction(
        self, name: str, fn: Callable[..., Any], *args: Any, retry: RetryPolicy | None = None
    ) -> Any:
        """Run `fn(conn, *args)` in one database transaction with the step's record.

        The lease is checked (same worker, same fence) in that transaction and held until it
        commits, so either the business writes and the step result commit together or
        neither does (`LeaseLostError`). `conn` is a psycopg `AsyncConnection` on
        PostgreSQL (write `async def fn`) and a `sqlite3.Connection` on SQLite.
        """
        x = self._x
        pos = x.next_position()
        replayed = self._replayed(x.history.at(pos, name), fn)
        if replayed is not _NOTHING:
            return replayed
        body = functools.partial(self._transact, pos, name, fn, args)
        return await self._execute(
            pos,
            name,
            "transaction",
            body,
            (),
            {},
            retry,
            None,
            records_itself=True,
            sig=_TRANSACT,  # a fresh partial per call: do not inspect (or cache) it
        )

    async def _transact(
        self, pos: int, name: str, fn: Callable[..., Any], args: tuple[Any, ...]
    ) -> Any:
        x = self._x
        attempt = x.history.next_attempt(pos)
        async with x.store.db.transaction() as tx:
            await x.store.check_lease(tx, x.lease)
            result = fn(tx.connection, *args)
            if inspect.isawaitable(result):
                result = await result
            output = x.encode(result, f"the result of step {name!r}")
            await x.store.record_finish(
                x.lease, pos, attempt, name, "transaction", "completed", output_json=output,
                tx=tx,
            )  # fmt: skip
        return decode(output)

    # ---------------------------------------------------------------- waits

    async def sleep(self, name: str, duration: Duration) -> None:
        """Sleep durably: the run parks and no worker is held until `duration` has passed."""
        x = self._x
        pos = x.next_position()
        rec = x.history.at(pos, name)
        if self._replayed(rec, None) is not _NOTHING:
            return
        seconds = parse_duration(duration).total_seconds()
        if rec is not None and rec.waiting:
            wake_at = rec.wake_at
        else:
            await x.defer_if_parking()
            await x.flush()
            x.spend_attempt()
            wake_at = await x.store.record_start(x.lease, pos, 1, name, "sleep", wait_s=seconds)
        if wake_at is not None and wake_at <= x.now():
            await x.store.record_finish(x.lease, pos, 1, name, "sleep", "completed")
            return
        await x.suspend(wake_at, f"sleep:{name}")

    async def wait_for_signal(
        self, signal: str, *, timeout: Duration | None = None, name: str | None = None
    ) -> Any:
        """Wait durably for signal `signal`; its data, or None once `timeout` has passed.

        A signal sent before this wait began was buffered and is received at once.
        """
        x = self._x
        step = name or signal
        pos = x.next_position()
        rec = x.history.at(pos, step)
        replayed = self._replayed(rec, None)
        if replayed is not _NOTHING:
            return replayed
        if rec is not None and rec.waiting:
            if rec.wake_at is not None and rec.wake_at <= x.now():
                async with x.store.db.transaction() as tx:
                    await x.store.lock_signal(tx, signal)
                    row = await x.store.resolve_wait(
                        tx, x.lease, pos, rec.attempt, "completed", "null"
                    )
                return decode(row["output"]) if row else None
            await x.suspend(rec.wake_at, f"signal:{signal}")
        await x.defer_if_parking()
        await x.flush()
        x.spend_attempt()
        wait_s = parse_duration(timeout).total_seconds() if timeout is not None else None
        async with x.store.db.transaction() as tx:
            taken = await x.store.take_signal(tx, signal, x.run_id)
            if taken is not None:
                await x.store.record_finish(
                    x.lease, pos, 1, step, "signal-wait", "completed",
                    output_json=taken["data"], tx=tx,
                )  # fmt: skip
                return decode(taken["data"])
            wake_at = await x.store.record_start(
                x.lease, pos, 1, step, "signal-wait", tx=tx, signal=signal, wait_s=wait_s
            )
        await x.suspend(wake_at, f"signal:{signal}")

    async def send_signal(
        self, signal: str, data: Any = None, *, idempotency_key: str | None = None,
        run_id: str | None = None, name: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Send a signal once, as a recorded step; the §4.3 result."""
        x = self._x
        step = name or f"send:{signal}"
        pos = x.next_position()
        replayed = self._replayed(x.history.at(pos, step), None)
        if replayed is not _NOTHING:
            return replayed  # type: ignore[no-any-return]
        await x.defer_if_parking()
        await x.flush()
        x.spend_attempt()
        data_json = x.encode(data, f"the data of signal {signal!r}")
        async with x.store.db.transaction() as tx:
            await x.store.check_lease(tx, x.lease)
            result = await x.store.send_signal_in(tx, signal, data_json, idempotency_key, run_id)
            await x.store.record_finish(
                x.lease, pos, 1, step, "signal-send", "completed",
                output_json=x.encode(result, "a signal result"), tx=tx,
            )  # fmt: skip
        x.store.db.notify_local("run")
        return result

    async def run_workflow(
        self, workflow: Workflow, input: Any = None, *, timeout: Duration | None = None,
        name: str | None = None,
    ) -> Any:  # fmt: skip
        """Start `workflow` as a child and wait durably for its result.

        Raises:
            ChildWorkflowError: the child failed or was canceled.
            WorkflowTimeoutError: `timeout` passed first (the child is canceled).
        """
        x = self._x
        step = name or f"child:{workflow.name}"
        pos = x.next_position()
        rec = x.history.at(pos, step)
        if rec is not None and rec.failed_for_good and rec.error:
            raise _child_error(rec.error)
        replayed = self._replayed(rec, None)
        if replayed is not _NOTHING:
            return replayed
        if rec is not None and rec.waiting and rec.child_run_id:
            return await self._check_child(pos, step, rec)
        await x.defer_if_parking()
        await x.flush()
        x.spend_attempt()
        child_id = uuid.uuid5(CHILD_NAMESPACE, f"{x.run_id}/{pos}").hex
        new = workflow.new_run(input, parent_run_id=x.run_id, run_id=child_id)
        wait_s = parse_duration(timeout).total_seconds() if timeout is not None else None
        async with x.store.db.transaction() as tx:
            await x.store.check_lease(tx, x.lease)
            await x.store.insert_run(tx, new)
            wake_at = await x.store.record_start(
                x.lease, pos, 1, step, "child", tx=tx, child_run_id=child_id, wait_s=wait_s
            )
        x.store.db.notify_local("run")
        await x.suspend(wake_at, f"child:{child_id}")

    async def _check_child(self, pos: int, step: str, rec: Recorded) -> Any:
        x = self._x
        assert rec.child_run_id is not None
        child = await x.store.get_run(rec.child_run_id)
        if child.terminal:
            if child.status == "completed":
                out = x.encode(child.output, "a child's result")
                await x.store.record_finish(
                    x.lease, pos, rec.attempt, step, "child", "completed", output_json=out
                )
                return child.output
            error = {
                "type": "ChildWorkflowError",
                "message": f"child run {child.run_id} {child.status}",
                "child_run_id": child.run_id,
                "status": child.status,
                "child_error": child.error,
            }
        elif rec.wake_at is not None and rec.wake_at <= x.now():
            with contextlib.suppress(RunTerminalError):
                await x.store.cancel(
                    child.run_id,
                    {"type": "WorkflowTimeoutError", "message": "the parent stopped waiting"},
                )
            error = {
                "type": "WorkflowTimeoutError",
                "child_run_id": child.run_id,
                "message": f"child run {child.run_id} did not finish in time; canceled",
            }
        else:
            await x.suspend(rec.wake_at, f"child:{child.run_id}")
        await x.store.record_finish(
            x.lease, pos, rec.attempt, step, "child", "failed", error=error, final=True
        )
        raise _child_error(error)


def _child_error(error: dict[str, Any]) -> Exception:
    if error.get("type") == "WorkflowTimeoutError":
        return WorkflowTimeoutError(error.get("message"))
    return ChildWorkflowError(
        error.get("child_run_id", "?"), error.get("status", "failed"), error.get("child_error")
    )


class _StartRecord:
    """An attempt's `running` row.

    A sync body runs in a thread, usually long and doing I/O: its row is durable before it
    starts, so a kill at any point leaves an attempt to mark abandoned. An async body's row
    is written as soon as the body first yields to the event loop, concurrently with it;
    one that finishes without ever yielding cannot be caught in flight, so it is recorded
    by one write: its end.
    """

    def __init__(self, x: Execution, pos: int, attempt: int, name: str, kind: str) -> None:
        self._write = functools.partial(x.store.record_start, x.lease, pos, attempt, name, kind)
        self._timer: asyncio.Handle | None = None
        self._task: asyncio.Task[Any] | None = None

    async def begin(self, is_async: bool) -> None:
        if not is_async:
            await self._write()
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_soon(
            lambda: setattr(self, "_task", loop.create_task(self._write()))
        )

    async def settle(self) -> None:
        """Cancel the row if it was not sent yet, or wait until it is written."""
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task


_NOTHING: Any = object()
_TRANSACT: tuple[bool, Any, bool] = (False, Any, True)  # no StepContext, any result, async
