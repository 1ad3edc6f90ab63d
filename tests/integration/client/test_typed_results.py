"""A run's result comes back as the workflow's return type, for children too."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from durably import Durably, InvalidInput, WorkflowContext


class Order(BaseModel):
    id: str


class Done(BaseModel):
    order_id: str
    items: int


@dataclass
class Point:
    x: int
    y: int


class Totals(TypedDict):
    count: int


async def test_results_are_validated_into_the_return_annotation(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="ship", version="v1")
    async def ship(ctx: WorkflowContext, order: Order) -> Done:
        n = await ctx.step.run("count", len, order.id)
        return Done(order_id=order.id, items=n)

    @app.workflow(name="point", version="v1")
    async def point(ctx: WorkflowContext, x: int) -> Point:
        return Point(x, x + 1)

    @app.workflow(name="totals", version="v1")
    async def totals(ctx: WorkflowContext) -> Totals:
        done = await ctx.step.run_workflow(ship, Order(id="abc"))
        assert isinstance(done, Done)  # a child's result is typed as well
        p = await ctx.step.start_workflow(point, 2)
        assert isinstance(p, Point)
        return {"count": done.items + p.y}

    async with app, app.worker(concurrency=4):
        done = await (await ship.start(Order(id="o-1"))).result(timeout="30s")
        assert done == Done(order_id="o-1", items=3)
        assert await (await point.start(5)).result(timeout="30s") == Point(5, 6)
        handle = await totals.start()
        assert await handle.result(timeout="30s") == {"count": 6}
        # A handle by id alone knows no workflow: its result stays plain JSON.
        assert await app.handle(handle.run_id).result() == {"count": 6}


async def test_an_output_that_no_longer_fits_is_a_clear_error(sqlite_url: str) -> None:
    app = Durably(sqlite_url)

    @app.workflow(name="ship", version="v1")
    async def ship(ctx: WorkflowContext, order: Order) -> Done:
        return Done(order_id=order.id, items=1)

    @app.workflow(name="other", version="v1")
    async def other(ctx: WorkflowContext) -> Totals:
        return {"count": 1}

    async with app, app.worker():
        handle = await other.start()
        await handle.result(timeout="30s")
        with pytest.raises(InvalidInput, match=f"output of run {handle.run_id}"):
            await ship.handle(handle.run_id).result()
