"""The lifecycles of commands that wait or talk to other runs: sleeps, signal waits and
sends, children. A wait is recorded as a `running` attempt with its wake time; the run's own
worker ends it as the next entry of the log (a signal's data, a time-out's None, a child's
result), and a run with nothing but waits left parks on them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import datetime
from typing import Any

from ..core.codec import canonical, decode, encode
from ..core.errors import InvalidInput, RunNotFound, RunTerminalError, StepFailedError, describe
from ..store.continues import follow
from ..store.operations import RESUMABLE, Operations
from ..store.records import NewRun, PendingStep
from ..workflow.commands import (
    NO_SIGNAL,
    Child,
    Command,
    SignalSend,
    SignalWait,
    Sleep,
    Wait,
    child_error,
    child_run_id,
)
from .claimed import Claimed, is_engine_failure

TIMED_OUT = {"type": "WorkflowTimeoutError", "message": "the parent stopped waiting"}
SUPERSEDED = {
    "type": "ChildSuperseded",
    "message": "a later attempt of the parent started a child of other input at its position",
}


async def run_sleep(x: Claimed, cmd: Command, spec: Sleep) -> None:
    rec = cmd.recorded
    if rec is not None and rec.waiting:
        attempt, wake_at = rec.attempt, rec.wake_at
    else:
        attempt = x.new_attempt(cmd.position)
        wake_at = await x.store.steps.record_start(
            x.lease, cmd.position, attempt, cmd.name, "sleep", wait_s=spec.seconds
        )
    if wake_at is not None and wake_at > x.now():
        cmd.wait = Wait(wake_at, f"sleep:{cmd.name}", attempt=attempt)
        return
    await _resolve_wait(x, cmd, attempt, None)


UNLIMITED = 1 << 62  # a value already within the limits when it was stored


async def run_signal_wait(x: Claimed, cmd: Command, spec: SignalWait) -> None:
    signal, rec = spec.signal, cmd.recorded
    if rec is not None and rec.waiting:
        delivered, data = rec.delivered, rec.output
        if not delivered and cmd.poked:  # a signal may have arrived while we ran
            row = await x.store.steps.get_attempt(x.run_id, cmd.position, rec.attempt)
            delivered = row is not None and row["delivered_at"] is not None
            data = decode(row["output"]) if row is not None and delivered else None
        if delivered:
            # A send fills only a wait that has no signal yet, so what was delivered is
            # final: the wait ends as an ordinary record (group-committed with the others,
            # and with the run's end when that comes first), not in a transaction of its own.
            await x.log.settle(cmd, PendingStep(
                cmd.position, rec.attempt, cmd.name, cmd.kind, "completed",
                output_json=encode(data, "a signal's data", UNLIMITED, x.codec),  # it was sent
            ), value=data)  # fmt: skip
        elif rec.wake_at is not None and rec.wake_at <= x.now():
            await _resolve_wait(x, cmd, rec.attempt, signal)
        else:
            cmd.wait = Wait(rec.wake_at, f"signal:{signal}", attempt=rec.attempt)
        return
    attempt = x.new_attempt(cmd.position)
    seq = x.log.reserve()
    try:
        taken, wake_at = await x.store.sends.begin_signal_wait(
            x.lease, cmd.position, attempt, cmd.name, signal, spec.timeout, seq
        )
    except BaseException:
        x.log.unreserve(seq)
        raise
    if taken is not None:
        x.log.publish(seq, cmd, value=decode(taken))
        return
    x.log.unreserve(seq)
    if wake_at is not None and wake_at <= x.now():
        await _resolve_wait(x, cmd, attempt, signal)
        return
    cmd.wait = Wait(wake_at, f"signal:{signal}", attempt=attempt)


async def _resolve_wait(
    x: Claimed,
    cmd: Command,
    attempt: int,
    signal: str | None,
    status: str = "completed",
    output: str | None = None,
    error: dict[str, Any] | None = None,
) -> None:
    """End a recorded wait (a delivered signal's data wins over a signal wait's timeout,
    which the workflow receives as `NO_SIGNAL`: the wait's default)."""
    seq = x.log.reserve()
    try:
        stored, delivered = await x.store.sends.resolve_wait(
            x.lease, cmd.position, attempt, signal, status, output, error, seq
        )
    except BaseException:
        x.log.unreserve(seq)
        raise
    if signal is not None and not delivered:
        x.log.publish(seq, cmd, value=NO_SIGNAL)
    elif status == "completed":
        x.log.publish(seq, cmd, value=decode(stored))
    else:
        assert error is not None
        x.log.publish(seq, cmd, error=child_error(error))


async def run_send_signal(x: Claimed, cmd: Command, spec: SignalSend) -> None:
    attempt = x.new_attempt(cmd.position)
    seq = x.log.reserve()
    try:
        result = await x.store.sends.send_signal_step(
            x.lease, cmd.position, attempt, cmd.name, seq, spec.signal, spec.data_json,
            spec.key, spec.run_id, lambda value: x.encode(value, "a signal result"),
            spec.expires_s,
        )  # fmt: skip
    except Exception as exc:
        x.log.unreserve(seq)
        if is_engine_failure(exc):
            raise
        # A refused send (the addressed run is finished, or unknown) fails the step.
        error = describe(exc)
        await x.log.settle(cmd, PendingStep(
            cmd.position, attempt, cmd.name, cmd.kind, "failed", error=error, final=True,
        ), error=StepFailedError(cmd.name, error))  # fmt: skip
        return
    x.log.publish(seq, cmd, value=result)


# ------------------------------------------------------------------ children


async def run_child(x: Claimed, cmd: Command, spec: Child) -> None:
    rec = cmd.recorded
    if rec is not None and rec.waiting and rec.child_run_id:
        await check_child(x, cmd, rec.attempt, rec.child_run_id, rec.wake_at)
        return
    earlier = x.history.child_at(cmd.position)  # an earlier workflow attempt's child
    attempt = x.new_attempt(cmd.position)
    try:
        new = spec.workflow.new_run(
            spec.input, max_payload=x.max_payload, codec=x.codec, parent_run_id=x.run_id,
            parent_close=spec.on_parent_close,
            run_id=earlier or child_run_id(x.run_id, cmd.position),
        )  # fmt: skip
    except InvalidInput as exc:
        error = describe(exc)
        await x.log.settle(cmd, PendingStep(
            cmd.position, attempt, cmd.name, cmd.kind, "failed", error=error, final=True,
        ), error=StepFailedError(cmd.name, error))  # fmt: skip
        return
    if earlier is not None:
        taken = await _take_over(x, cmd, new, attempt)
        if taken is None:  # the earlier child is still undoing its work: wait for its end
            cmd.wait = Wait(None, f"child:{new.run_id}", attempt=attempt, ended_by=new.run_id)
            return
        new = taken
    child_id = cmd.child_run_id = new.run_id
    assert child_id is not None
    wake_at, created = await x.store.start_child(
        x.lease, cmd.position, attempt, cmd.name, new, _timeout(x, spec)
    )
    if created:
        cmd.wait = Wait(wake_at, f"child:{child_id}", attempt=attempt, child_run_id=child_id,
                        ended_by=child_id)  # fmt: skip
    else:  # started before (a lost reply, an earlier attempt): it may have ended already
        await check_child(x, cmd, attempt, child_id, wake_at)


async def _take_over(x: Claimed, cmd: Command, new: NewRun, attempt: int) -> NewRun | None:
    """A new workflow attempt (a retry, a resume) at a position where an earlier one started
    a child: the same child, never a second doing the same work. One that completed gives
    its result, one still going is waited for, one that failed or was canceled is resumed
    (its completed steps are not run again). But one whose compensations ran undid its
    work (resumed, it would go on past steps undone): this attempt starts its own, as it
    does in place of a child of another workflow or input (canceled if still going). None:
    the child is still running its compensations; the call waits for their end, unrecorded
    (the child's end wakes the run, and the call there looks again)."""
    assert new.run_id is not None
    try:
        old = await x.store.get_run(new.run_id)
    except RunNotFound:  # purged with its parent's earlier end: the name is free again
        return new
    same = old.workflow == new.workflow and canonical(old.input) == canonical(
        decode(new.input_json)
    )
    if same and old.status in RESUMABLE:
        if old.compensating:
            return None
        if not await _undone(x, old.run_id):
            try:
                await Operations(x.store).resume(old.run_id)
            except InvalidInput:  # resumed by another meanwhile, or compensating since
                return None if (await x.store.get_run(old.run_id)).compensating else new
            return new
    elif same:
        return new
    elif not old.terminal:
        with contextlib.suppress(RunTerminalError):
            await x.store.cancel(old.run_id, SUPERSEDED)
    return dataclasses.replace(new, run_id=child_run_id(x.run_id, cmd.position, attempt))


async def _undone(x: Claimed, run_id: str) -> bool:
    """A compensation of the run completed (recorded at -(p + 1): see `run_compensation`)."""
    steps = await x.store.list_steps(run_id)
    return any(s.position < 0 and s.status == "completed" for s in steps)


async def check_child(
    x: Claimed, cmd: Command, attempt: int, child_id: str, wake_at: datetime | None
) -> None:
    # A child that continued as new: its chain's end is the outcome (store/continues.py).
    child = await follow(x.store.get_run, await x.store.get_run(child_id))
    if not child.terminal and (wake_at is None or wake_at > x.now()):
        cmd.wait = Wait(wake_at, f"child:{child.run_id}", attempt=attempt,
                        child_run_id=child.run_id, ended_by=child.run_id)  # fmt: skip
        return
    if not child.terminal:
        # Timed out: cancel the child. It may end on its own meanwhile: then its end, read
        # again, is the outcome (a child that completed is the parent's result).
        try:
            child = await x.store.cancel(child.run_id, TIMED_OUT)
        except RunTerminalError:
            child = await follow(x.store.get_run, await x.store.get_run(child.run_id))
    if child.status == "completed":
        out = x.encode(child.output, "a child's result")
        await _resolve_wait(x, cmd, attempt, None, output=out)
        return
    error: dict[str, Any]
    if child.status == "canceled" and (child.error or {}).get("type") == TIMED_OUT["type"]:
        # Canceled for the parent's time-out (by this claim, or by one that did so before
        # it could record the time-out).
        error = {
            "type": "WorkflowTimeoutError", "child_run_id": child.run_id,
            "message": f"child run {child.run_id} did not finish in time; canceled",
        }  # fmt: skip
    else:
        error = {
            "type": "ChildWorkflowError",
            "message": f"child run {child.run_id} {child.status}",
            "child_run_id": child.run_id, "status": child.status, "child_error": child.error,
        }  # fmt: skip
    await _resolve_wait(x, cmd, attempt, None, status="failed", error=error)


def _timeout(x: Claimed, spec: Child) -> float | None:
    """A child's timeout in seconds from now (an absolute one passed already: at once)."""
    if spec.deadline is None:
        return spec.timeout
    return max((spec.deadline - x.now()).total_seconds(), 0.0)
