"""The worker's side of starting by name (issue 31 item 9): `place-order`, with a typed
input a thin client knows nothing of. Run by `durably worker --app tests.apps.byname:app`;
`tests.apps.thin` is the other side.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from durably import Durably, RetryPolicy, WorkflowContext

app = Durably(os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db"))


class Order(BaseModel):
    id: str
    amount: int


def charge(order: Order) -> str:
    return f"charged {order.amount} for {order.id}"


@app.workflow(name="place-order", version="v1")
async def place_order_v1(ctx: WorkflowContext, order: Order) -> str:
    return "v1"


@app.workflow(name="place-order", version="v2", retry=RetryPolicy(max_attempts=3))
async def place_order(ctx: WorkflowContext, order: Order) -> str:
    # The newest version registered: the one a version-less run is bound to.
    return await ctx.step.run("charge", charge, order)
