"""A run's stored input that no longer fits the workflow's input model (a required field
added by a deploy) shows the real cause, on both backends: pydantic's validation error as
`InvalidInput` naming the field, with its traceback, never a `NonDeterminismError` blaming
the steps the code "did not reach" (issue 31 item 4). A deploy mistake like a replay
mismatch: the run is held, nothing undone, until code that fits continues it (item 2)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator

from durably import Durably, Run, WorkflowContext
from tests.helpers import eventually, scaled


class Order(BaseModel):
    id: str


class OrderWithCurrency(BaseModel):
    id: str
    currency: str  # added by the deploy, required


class OrderLookedUp(BaseModel):
    id: str

    @field_validator("id")
    @classmethod
    def known(cls, value: str) -> str:
        raise LookupError(f"no order {value} in the new catalogue")  # not pydantic's kind


async def test_a_required_field_added_to_the_input_fails_the_run_naming_it(db_url: str) -> None:
    run, ran = await _deploy_under_a_waiting_run(db_url, OrderWithCurrency)
    assert run.status == "held", run
    error = run.error or {}
    assert error.get("type") == "InvalidInput", error
    assert "input of workflow 'order'" in error["message"], error
    assert "currency: Field required" in error["message"], error
    assert "Traceback" in error.get("traceback", ""), error
    assert ran == ["o-1"]  # the step recorded before the deploy never ran again, nor its undo


async def test_a_validator_that_raises_its_own_error_fails_the_run_with_it(db_url: str) -> None:
    run, ran = await _deploy_under_a_waiting_run(db_url, OrderLookedUp)
    assert run.status == "held", run
    error = run.error or {}
    assert error.get("type") == "LookupError", error
    assert "no order o-1 in the new catalogue" in error["message"], error
    assert "in known" in error.get("traceback", ""), error
    assert ran == ["o-1"]


async def _deploy_under_a_waiting_run(db_url: str, model: type[BaseModel]) -> tuple[Run, list[str]]:
    """A run of `order` waits after one step; a deploy changes its input model to `model`
    and holds the run; the run as the deploy left it. Then the original code, deployed
    again, completes it."""
    app = Durably(db_url)
    ran: list[str] = []

    def reserve(order_id: str) -> str:
        ran.append(order_id)
        return order_id

    def release(order_id: str) -> None:
        ran.append(f"undo {order_id}")

    @app.workflow(name="order", version="v1")
    async def order(ctx: WorkflowContext, order: Order) -> str:
        await ctx.step.run("reserve", reserve, order.id, compensate=release)
        await ctx.step.wait_for_signal(f"approved:{order.id}")
        return order.id

    async with app, app.worker():
        handle = await order.start(Order(id="o-1"))
        await eventually(lambda: _waiting(app, handle.run_id), what="the run waiting")

    deployed = Durably(db_url)

    async def order_v2(ctx: WorkflowContext, order: Any) -> str:
        await ctx.step.run("reserve", reserve, order.id, compensate=release)
        await ctx.step.wait_for_signal(f"approved:{order.id}")
        return str(order)

    order_v2.__annotations__["order"] = model  # the deployed code's input model
    deployed.workflow(name="order", version="v1")(order_v2)

    async with deployed, deployed.worker():
        await deployed.send_signal("approved:o-1")
        held = await eventually(lambda: _held(deployed, handle.run_id), what="the run held")

    async with app, app.worker():  # the fix: code whose model fits the stored input
        assert await handle.result(timeout=scaled(20)) == "o-1"
    return held, ran


async def _held(app: Durably, run_id: str) -> Run | None:
    run = await app.get_run(run_id)
    return run if run.status == "held" else None


async def _waiting(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting"
