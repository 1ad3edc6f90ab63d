"""Typing cases checked by mypy (never run): workflows, run handles and children.

`assert_type` pins what a type checker infers; a `# type: ignore[code]` line is a call
mypy must reject with that code (`warn_unused_ignores` fails the check if it does not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict, assert_type

from pydantic import BaseModel

from durably import ChildHandle, Durably, RunHandle, Workflow, WorkflowContext

app = Durably("sqlite:///:memory:")


class Order(BaseModel):
    id: str


class Done(BaseModel):
    order_id: str


@dataclass
class Point:
    x: int
    y: int


class Totals(TypedDict):
    count: int


@app.workflow(name="ship", version="v1")
async def ship(ctx: WorkflowContext, order: Order) -> Done:
    return Done(order_id=order.id)


@app.workflow(name="tick", version="v1")
async def tick(ctx: WorkflowContext) -> int:
    return 1


@app.workflow(name="point", version="v1")
async def point(ctx: WorkflowContext, x: int) -> Point:
    return Point(x, x)


@app.workflow(name="totals", version="v1")
async def totals(ctx: WorkflowContext, names: list[str]) -> Totals:
    return {"count": len(names)}


@app.workflow(name="untyped", version="v1")
async def untyped(ctx, data):  # type: ignore[no-untyped-def]
    return data


assert_type(ship, Workflow[Order, Done])
assert_type(tick, Workflow[None, int])
assert_type(point, Workflow[int, Point])
assert_type(totals, Workflow[list[str], Totals])


async def client() -> None:
    handle = await ship.start(Order(id="o1"), idempotency_key="k")
    assert_type(handle, RunHandle[Done])
    assert_type(await handle.result(), Done)
    assert_type(await (await tick.start()).result(timeout="5s"), int)
    assert_type(await (await point.start(3)).result(), Point)
    assert_type(await (await totals.start(["a"])).result(), Totals)
    assert_type(ship.handle("run-id"), RunHandle[Done])
    assert_type(app.handle("run-id"), RunHandle[Any])
    assert_type(await app.start("ship", {"id": "o1"}), RunHandle[Any])

    await ship.start({"id": "o1"})  # type: ignore[arg-type]
    await ship.start()  # type: ignore[call-arg]
    await tick.start(5)  # type: ignore[call-overload]
    await point.start("3")  # type: ignore[arg-type]
    _ = (await handle.result()).missing  # type: ignore[attr-defined]


@app.workflow(name="parent", version="v1")
async def parent(ctx: WorkflowContext, order: Order) -> list[int]:
    done = await ctx.step.run_workflow(ship, order, timeout="1h")
    assert_type(done, Done)
    assert_type(await ctx.step.run_workflow(tick), int)
    child = ctx.step.start_workflow(point, 2)
    assert_type(child, ChildHandle[Point])
    assert_type(await child, Point)
    assert_type(await child.result(), Point)

    await ctx.step.run_workflow(ship, "o1")  # type: ignore[misc]  # In: Order or str?
    await ctx.step.run_workflow(ship)  # type: ignore[arg-type]
    ctx.step.start_workflow(point, "2")  # type: ignore[misc]
    return [done.order_id.count("o")]
