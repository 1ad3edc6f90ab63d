"""An app the HTTP API tests serve (`durably serve --app tests.apps.served:app`) and run
in a worker: a workflow that completes at once, one that fails for good, and one that
publishes an event and waits for a signal. Configured by DURABLY_DATABASE_URL."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from durably import Durably, RetryPolicy

app = Durably(os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db"))
ONCE = RetryPolicy(max_attempts=1)


class Order(BaseModel):
    id: str
    amount: int = 1


def total(order: Order) -> int:
    return order.amount * 10


@app.workflow(name="price", version="v1")
async def price(ctx: Any, order: Order) -> dict[str, Any]:
    return {"id": order.id, "total": await ctx.step.run("total", total, order)}


def decline() -> None:
    raise RuntimeError("card declined")


@app.workflow(name="charge", version="v1", retry=ONCE)
async def charge(ctx: Any, order: Order) -> None:
    await ctx.step.run("charge", decline, retry=ONCE)


@app.workflow(name="approval", version="v1")
async def approval(ctx: Any, order: Order) -> Any:
    await ctx.step.set_event("stage", {"waiting": f"approve:{order.id}"})
    got = await ctx.step.wait_for_signal(f"approve:{order.id}", timeout="1h")
    await ctx.step.set_event("stage", {"approved": got})
    return got


@app.workflow(name="answer", version="v1")
async def answer(ctx: Any, count: int) -> int:
    """Answer `count` requests "ask": double a number, reject anything else."""
    for _ in range(count):
        req = await ctx.step.wait_for_request("ask")
        if isinstance(req.data, int):
            await ctx.step.reply(req, req.data * 2)
        else:
            await ctx.step.reject(req, f"{req.data!r} is not a number")
    return count
