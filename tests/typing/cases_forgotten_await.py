# mypy: enable-error-code="unused-awaitable"
"""Typing cases checked by mypy (never run): with mypy's opt-in `unused-awaitable` check, a
step call never awaited is caught at type-check time (the engine refuses it at run time).

A `# type: ignore[code]` line is a call mypy must reject with that code.
"""

from __future__ import annotations

from durably import Durably, WorkflowContext

app = Durably("sqlite:///:memory:")


def reserve(order_id: str) -> str:
    return order_id


@app.workflow(name="forgot", version="v1")
async def forgot(ctx: WorkflowContext, order_id: str) -> str:
    ctx.step.run("reserve", reserve, order_id)  # type: ignore[unused-awaitable]
    ctx.step.sleep("nap", "1s")  # type: ignore[unused-awaitable]
    kept = ctx.step.run("kept", reserve, order_id)  # kept and awaited later: fine
    _ = ctx.step.start_workflow(other, order_id)  # a child left alone on purpose: say so
    return await kept


@app.workflow(name="other", version="v1")
async def other(ctx: WorkflowContext, order_id: str) -> str:
    return order_id
