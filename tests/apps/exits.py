"""An app whose user code raises what is not an `Exception`: `SystemExit` (argparse on a bad
option, click's standalone `main()`), `KeyboardInterrupt`, `GeneratorExit`, a
`BaseException` of its own. SPEC §4.20: each is a failure of its step or workflow, retried
by policy, and never stops the worker.

Configured by environment: DURABLY_DATABASE_URL; RAN_LOG, a file each body, compensation
and workflow attempt appends "run_id what pid" to (what ran, and in which process).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel, field_validator

from durably import Durably, RetryPolicy, StepContext, SyncWorkflowContext, WorkflowContext

app = Durably(os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db"))
TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")


class Custom(BaseException):
    """A BaseException of the application's own."""


RAISES: dict[str, Any] = {
    "exit": lambda: SystemExit(2),
    "interrupt": KeyboardInterrupt,
    "generator-exit": GeneratorExit,
    "custom": lambda: Custom("custom"),
}


def ran(run_id: str, what: str) -> None:
    with open(os.environ["RAN_LOG"], "a") as out:
        out.write(f"{run_id} {what} {os.getpid()}\n")


def sync_body(ctx: StepContext, kind: str) -> None:
    ran(ctx.run_id, ctx.step)
    raise RAISES[kind]()


async def async_body(ctx: StepContext, kind: str) -> None:
    ran(ctx.run_id, ctx.step)
    await asyncio.sleep(0)
    raise RAISES[kind]()


async def instant_body(ctx: StepContext, kind: str) -> None:
    ran(ctx.run_id, ctx.step)  # raises before it ever yields to the event loop
    raise RAISES[kind]()


BODIES = {"sync": sync_body, "async": async_body, "instant": instant_body}


@app.workflow(name="step", version="v1")
async def step(ctx: WorkflowContext, spec: dict[str, str]) -> None:
    await ctx.step.run("raise", BODIES[spec["body"]], spec["kind"], retry=TWICE)


@app.workflow(name="flow", version="v1", retry=TWICE)
async def flow(ctx: WorkflowContext, kind: str) -> None:
    ran(ctx.run_id, "flow")
    raise RAISES[kind]()


@app.workflow(name="sync-flow", version="v1", retry=TWICE)
def sync_flow(ctx: SyncWorkflowContext, kind: str) -> None:
    ran(ctx.run_id, "sync-flow")
    raise RAISES[kind]()


def tx_body(conn: Any, run_id: str, kind: str) -> None:
    ran(run_id, "tx")
    raise RAISES[kind]()


@app.workflow(name="tx", version="v1")
async def tx(ctx: WorkflowContext, kind: str) -> None:
    await ctx.step.transaction("tx", tx_body, ctx.run_id, kind, retry=TWICE)


def reserve(ctx: StepContext) -> str:
    ran(ctx.run_id, ctx.step)
    return "reserved"


def release(ctx: StepContext, reserved: str) -> None:
    """The compensation: raises SystemExit on its first attempt, succeeds on its second."""
    ran(ctx.run_id, ctx.step)
    if ctx.attempt == 1:
        raise SystemExit(3)


@app.workflow(name="saga", version="v1")
async def saga(ctx: WorkflowContext) -> None:
    await ctx.step.run("reserve", reserve, compensate=release)
    await ctx.step.run("charge", sync_body, "exit", retry=TWICE)


def ok_body(ctx: StepContext) -> str:
    ran(ctx.run_id, ctx.step)
    return "ok"


@app.workflow(name="ok", version="v1")
async def ok(ctx: WorkflowContext) -> str:
    return await ctx.step.run("ok", ok_body)


class Checked(BaseModel):
    """A declared type whose validator raises what `kind` names: validation is user code.
    As a workflow's input it raises only in a worker (WORKER_NAME), so it can be started."""

    kind: str

    @field_validator("kind")
    @classmethod
    def _check(cls, kind: str) -> str:
        if kind in RAISES and (cls.__name__ != "CheckedInput" or os.environ.get("WORKER_NAME")):
            raise RAISES[kind]()
        return kind


class CheckedInput(Checked):
    pass


def checked_body(ctx: StepContext, kind: str) -> Checked:
    ran(ctx.run_id, ctx.step)
    return Checked.model_construct(kind=kind)  # as stored; validated as it is received


@app.workflow(name="checked-step", version="v1", retry=TWICE)
async def checked_step(ctx: WorkflowContext, kind: str) -> str:
    await ctx.step.run("reserve", reserve, compensate=release_once)
    return (await ctx.step.run("checked", checked_body, kind)).kind


@app.workflow(name="checked-child-of", version="v1")
async def checked_child_of(ctx: WorkflowContext, kind: str) -> Checked:
    return Checked.model_construct(kind=kind)


@app.workflow(name="checked-child", version="v1", retry=TWICE)
async def checked_child(ctx: WorkflowContext, kind: str) -> str:
    ran(ctx.run_id, "checked-child")
    return (await ctx.step.run_workflow(checked_child_of, kind)).kind


@app.workflow(name="checked-input", version="v1", retry=TWICE)
async def checked_input(ctx: WorkflowContext, value: CheckedInput) -> str:
    ran(ctx.run_id, "checked-input")
    return value.kind


def release_once(ctx: StepContext, reserved: str) -> None:
    ran(ctx.run_id, ctx.step)


class Unprintable(Exception):
    """An error whose message is user code too: its str() raises SystemExit."""

    def __str__(self) -> str:
        raise SystemExit(4)


def unprintable_body(ctx: StepContext) -> None:
    ran(ctx.run_id, ctx.step)
    raise Unprintable


@app.workflow(name="unprintable", version="v1", retry=TWICE)
async def unprintable(ctx: WorkflowContext, where: str) -> None:
    if where == "step":
        await ctx.step.run("unprintable", unprintable_body, retry=TWICE)
    raise Unprintable
