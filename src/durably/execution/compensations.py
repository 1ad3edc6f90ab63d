"""Compensations: the undo (`compensate=`) of a completed step, and `ctx.step.compensate()`.

An undo is recorded as a step of its own at position -(p + 1) for the step at p, named
`compensate:<name>`; it is not an entry of the run's log (the workflow does not receive
it). A function step's undo, `undo(result)`, runs as a function body (at least once, as
any step body). A transaction's undo, `undo(conn, result)`, runs as a transaction of its
own, fenced as the step's body was, with its record committed in it: exactly once, even
when its worker dies in the middle of it (the next owner finds no record and runs it
again; its writes rolled back with the first).

An undo gets the step's result as the workflow got it (validated into its annotation).
Undos are never interrupted by the engine (nor is a run let go, retried or ended while a
`compensate()` undoes: `CommandTasks._undoing`), and never count against the run's limit of
attempts (a run at its limit must still undo). A failed one is retried in place on the
step default's back-off, up to its attempts; then it is given up (logged). Which steps are
undone, and that each is undone once, is the execution's (`undos`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from typing import Any

from ..core.codec import validate
from ..core.errors import NonRetryableError, StepFailedError, describe
from ..core.retry import STEP_DEFAULT
from ..store.records import PendingStep
from ..workflow.commands import Body, Command, Compensate, signature
from .claimed import Claimed, is_engine_failure
from .steps import _begin, _contained_call, _invoke

log = logging.getLogger("durably.worker")


async def run_compensate_now(x: Claimed, cmd: Command, spec: Compensate) -> None:
    """`ctx.step.compensate()`: the undos of the steps the workflow had received, newest
    first, then the step's own record (the names undone), the next entry of the log. A
    claim that dies before that record leaves the next one to run only the undos that did
    not complete; the record names them all."""
    undone: list[str] = []
    failure: tuple[Command, dict[str, Any], int] | None = None
    for done in x.undos.take(spec.through):
        error = await run_compensation(x, done)
        if error is None:
            undone.append(done.name)
            continue
        x.undos.failed(done)
        if failure is None:
            failure = (done, error, x.history.failures(-done.position - 1))
    attempt = x.new_attempt(cmd.position, spend=False)
    if failure is None:
        output = x.encode(undone, "the steps undone")
        record = PendingStep(cmd.position, attempt, cmd.name, cmd.kind, "completed",
                             output_json=output)  # fmt: skip
        await x.log.settle(cmd, record, value=undone)
        return
    failed, error, attempts = failure
    error = {**error, "step": f"compensate:{failed.name}", "attempts": attempts}
    record = PendingStep(cmd.position, attempt, cmd.name, cmd.kind, "failed", error=error,
                         final=True)  # fmt: skip
    failed_for_good = StepFailedError(error["step"], error, attempts)  # as `error_for` replays it
    await x.log.settle(cmd, record, error=failed_for_good)


async def run_compensation(x: Claimed, cmd: Command) -> dict[str, Any] | None:
    """Run `cmd`'s undo once as a recorded step at -(p + 1); retries wait in place. None
    once it completed (by an earlier claim: not run again); the error it failed with for
    good."""
    assert cmd.compensate is not None
    pos, name = -cmd.position - 1, f"compensate:{cmd.name}"
    done = x.history.recorded_at(pos)
    if done is not None and done.completed:
        return None
    kind = "transaction" if cmd.kind == "transaction" else "function"
    comp = Command(pos, name, kind, cmd.future, None)
    try:  # the result as the workflow received it (validated as it was: it fits)
        result = validate(cmd.result_type, cmd.value, f"the result of step {cmd.name!r}")
    except Exception as exc:  # it did not fit, so the workflow got the error: undo the JSON
        log.warning("run %s: %s: its undo gets it as JSON", x.run_id, exc)
        result = cmd.value
    body = Body(cmd.compensate, (result,), {}, sig=signature(cmd.compensate))
    while True:
        attempt, began, start = await _begin(
            x, comp, body.sig[2] or kind == "transaction", spend=False,
            wants_ctx=body.sig[0] and kind == "function",
        )  # fmt: skip
        try:
            try:
                if kind == "transaction":
                    await _undo_in_transaction(x, comp, body, attempt)
                else:
                    await _invoke(x, comp, body, attempt, start, interruptible=False)
            except asyncio.CancelledError as cancel:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the engine's own: the execution stops
                    raise
                # An undo is never interrupted by the engine: this one is its own.
                raise RuntimeError(f"CancelledError: {cancel}") from cancel
        except Exception as exc:
            await start.settle()
            if is_engine_failure(exc):  # a lost lease: nothing of the undo committed
                raise
            error = describe(exc)
            x.history.failed(pos)
            failures = x.history.failures(pos)
            final = isinstance(exc, NonRetryableError) or failures >= STEP_DEFAULT.max_attempts
            await x.log.record(PendingStep(
                pos, attempt, name, kind, "failed", error=error, final=final,
                elapsed_s=x.clock.monotonic() - began,
            ))  # fmt: skip
            if final:
                log.error("run %s: compensation %r failed for good: %s", x.run_id, name, error)
                return error
            await asyncio.sleep(STEP_DEFAULT.delay(failures).total_seconds())
            continue
        await start.settle()
        if kind == "function":  # a transaction's record committed with its writes
            await x.log.record(PendingStep(
                pos, attempt, name, kind, "completed", output_json="null",
                elapsed_s=x.clock.monotonic() - began,
            ))  # fmt: skip
        return None


async def _undo_in_transaction(x: Claimed, comp: Command, body: Body, attempt: int) -> None:
    """`undo(conn, result)` and its record in one transaction, as `run_transaction` runs a
    body (a sync undo is contained in the connection's thread on SQLite)."""
    is_async = inspect.iscoroutinefunction(body.fn)
    fn = body.fn if is_async else functools.partial(_contained_call, body.fn)
    await x.store.steps.transact(
        x.lease, x.lease_s, comp.position, attempt, comp.name, None, fn, body.args,
        lambda _: "null",
    )  # fmt: skip
