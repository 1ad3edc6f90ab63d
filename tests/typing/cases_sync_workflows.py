"""Typing cases checked by mypy (never run): sync workflows (a plain `def`) and their
step API, whose calls return results instead of awaitables.

A `# type: ignore[code]` line is a call mypy must reject with that code.
"""

from __future__ import annotations

import sqlite3
from typing import Any, assert_type

from pydantic import BaseModel

from durably import (
    Durably,
    RunHandle,
    StepContext,
    SyncChildHandle,
    SyncWorkflowContext,
    Workflow,
    WorkflowContext,
)

app = Durably("sqlite:///:memory:")


class Order(BaseModel):
    id: str


class Done(BaseModel):
    order_id: str


def add(a: int, b: int = 1) -> int:
    return a + b


async def fetch(url: str) -> bytes:
    return url.encode()


def copy(ctx: StepContext, src: str, dst: str) -> str:
    return dst


def register(conn: sqlite3.Connection, order_id: str) -> int:
    return len(order_id)


def unregister(conn: sqlite3.Connection, registered: int) -> None:
    pass


def unregister_by_name(conn: sqlite3.Connection, registered: str) -> None:
    pass


@app.workflow(name="leaf", version="v1")
def leaf(ctx: SyncWorkflowContext, n: int) -> str:
    return str(n)


@app.workflow(name="ship-sync", version="v1")
def ship(ctx: SyncWorkflowContext, order: Order) -> Done:
    assert_type(ctx.step.run("add", add, 1), int)
    assert_type(ctx.step.run("fetch", fetch, "https://x", timeout="5s"), bytes)
    assert_type(ctx.step.run("copy", copy, "a", "b"), str)
    assert_type(ctx.step.transaction("reg", register, order.id), int)
    assert_type(ctx.step.transaction("reg2", register, order.id, compensate=unregister), int)
    assert_type(ctx.step.compensate(), list[str])
    assert_type(ctx.step.sleep("nap", "7 days"), None)
    assert_type(ctx.step.wait_for_signal("go", timeout="1h"), Any)
    assert_type(ctx.step.send_signal("topic", {"ok": True}), dict[str, Any])
    assert_type(ctx.step.run_workflow(leaf, 3), str)
    handle = ctx.step.start_workflow(leaf, 4)
    assert_type(handle, SyncChildHandle[str])
    assert_type(handle.result(), str)
    assert_type(ctx.patched("p1"), bool)
    assert_type(ctx.run_id, str)

    ctx.step.run("add", add, "1")  # type: ignore[arg-type]
    ctx.step.run("fetch", fetch, 42)  # type: ignore[arg-type]
    ctx.step.transaction("reg", register, order.id, compensate=unregister_by_name)  # type: ignore[arg-type]
    ctx.step.run_workflow(leaf, "3")  # type: ignore[misc]  # In: int or str?
    ctx.step.run_workflow(leaf)  # type: ignore[arg-type]
    _ = ctx.step.run("add", add, 1).upper()  # type: ignore[attr-defined]
    return Done(order_id=order.id)


@app.workflow(name="tick-sync", version="v1")
def tick(ctx: SyncWorkflowContext) -> int:
    return 1


assert_type(ship, Workflow[Order, Done])
assert_type(tick, Workflow[None, int])
assert_type(leaf, Workflow[int, str])


@app.workflow(name="parent", version="v1")
async def parent(ctx: WorkflowContext) -> str:
    # An async workflow runs a sync one as a child like any other.
    return await ctx.step.run_workflow(leaf, 1)


async def client() -> None:
    handle = await ship.start(Order(id="o1"))
    assert_type(handle, RunHandle[Done])
    assert_type(await handle.result(), Done)
    await ship.start({"id": "o1"})  # type: ignore[arg-type]


# An async workflow's steps must be awaited: a sync habit there is a type error.
@app.workflow(name="wrong-ctx", version="v1")
async def wrong_ctx(ctx: WorkflowContext) -> int:
    return ctx.step.run("add", add, 1)  # type: ignore[return-value]
