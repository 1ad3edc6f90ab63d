"""An order service: a saga over stock, payment and an approval, a child per item.

`place-order` reserves stock (a plain step, undone by releasing it), charges the payment
in the engine's transaction (undone by a refund, also exactly once), waits up to two days
for a person's approval, ships each item in a child workflow and notifies the customer (a
flaky call, retried). A rejection or a timeout undoes what was done and returns normally;
a cancel or a failure undoes it too. Orders queue with at most one running per customer.
A schedule sums the day's payments every morning.

    cd examples/orders && uv run durably --app orders:app worker
    uv run durably --app orders:app start place-order --input @order.json
    uv run durably signal approval:o-1 --data '{"approved": true, "by": "ana"}'
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from pydantic import BaseModel, Field

import shop
from durably import Durably, RetryPolicy, StepContext, WorkflowContext

app = Durably()
orders = app.queue("orders", per_key=1)  # one running order per customer at a time


class Item(BaseModel):
    sku: str
    quantity: int = Field(gt=0)


class Order(BaseModel):
    id: str
    customer: str
    items: list[Item] = Field(min_length=1)
    amount: int = Field(gt=0, description="cents")


class Approval(BaseModel):
    approved: bool
    by: str


class Outcome(BaseModel):
    order_id: str
    status: Literal["shipped", "rejected", "expired"]
    shipped: list[str] = []
    undone: list[str] = []  # the steps a rejection or an expiry undid, newest first


def reserve_stock(order: Order) -> str:
    with contextlib.closing(shop.connect(app.url)) as conn:  # idempotent by order id
        shop.execute(conn, "INSERT INTO stock_holds VALUES (?, ?) ON CONFLICT DO NOTHING",
                     (order.id, ",".join(i.sku for i in order.items)))  # fmt: skip
    return order.id


def release_stock(order_id: str) -> None:  # an undo gets its step's result
    with contextlib.closing(shop.connect(app.url)) as conn:
        shop.execute(conn, "DELETE FROM stock_holds WHERE order_id = ?", (order_id,))


class Payment(BaseModel):
    order_id: str
    amount: int


async def charge(conn: Any, order: Order) -> Payment:
    await shop.execute_async(conn, "INSERT INTO payments VALUES (?, 'charge', ?)",
                             (order.id, order.amount))  # fmt: skip
    return Payment(order_id=order.id, amount=order.amount)


async def refund(conn: Any, payment: Payment) -> None:  # undo(conn, result), typed as it
    await shop.execute_async(conn, "INSERT INTO payments VALUES (?, 'refund', ?)",
                             (payment.order_id, -payment.amount))  # fmt: skip


def ship(order_id: str, item: Item) -> str:
    with contextlib.closing(shop.connect(app.url)) as conn:
        shop.execute(conn, "INSERT INTO shipments VALUES (?, ?) ON CONFLICT DO NOTHING",
                     (order_id, item.sku))  # fmt: skip
    return item.sku


class Shipping(BaseModel):
    order_id: str
    item: Item


@app.workflow(name="ship-item", version="v1")
async def ship_item(ctx: WorkflowContext, job: Shipping) -> str:
    return await ctx.step.run("ship", ship, job.order_id, job.item)


notices: dict[str, int] = {}  # attempts per order: the mail server fails the first one


def notify(sctx: StepContext, order_id: str, status: str) -> str:
    notices[order_id] = notices.get(order_id, 0) + 1
    if sctx.attempt == 1:
        raise ConnectionError("mail server unreachable")
    return f"{order_id}: {status}"


@app.workflow(name="place-order", version="v1", queue=orders,
              retry=RetryPolicy(max_attempts=1))  # fmt: skip
async def place_order(ctx: WorkflowContext, order: Order) -> Outcome:
    await ctx.step.run("reserve-stock", reserve_stock, order, compensate=release_stock)
    await ctx.step.transaction("charge-payment", charge, order, compensate=refund)
    approval = await ctx.step.wait_for_signal(f"approval:{order.id}", type=Approval,
                                              timeout="2 days")  # fmt: skip
    if approval is None or not approval.approved:
        undone = await ctx.step.compensate()  # refund, then release the stock: newest first
        status: Literal["rejected", "expired"] = "expired" if approval is None else "rejected"
        await ctx.step.run("notify", notify, order.id, status,
                           retry=RetryPolicy(max_attempts=3, initial_interval="1s"))  # fmt: skip
        return Outcome(order_id=order.id, status=status, undone=undone)
    shipments = [
        ctx.step.start_workflow(ship_item, Shipping(order_id=order.id, item=item))
        for item in order.items
    ]
    shipped = [await handle for handle in shipments]
    await ctx.step.run("notify", notify, order.id, "shipped",
                       retry=RetryPolicy(max_attempts=3, initial_interval="1s"))  # fmt: skip
    return Outcome(order_id=order.id, status="shipped", shipped=shipped)


def day_total(day: str) -> int:
    with contextlib.closing(shop.connect(app.url)) as conn:
        return int(shop.execute(conn, "SELECT COALESCE(SUM(amount), 0) FROM payments")[0][0])


@app.workflow(name="daily-report", version="v1", schedule="0 6 * * *", tz="Europe/Paris")
async def daily_report(ctx: WorkflowContext, tick: dict[str, str]) -> int:
    return await ctx.step.run("sum-payments", day_total, tick["scheduled_at"])


async def place(order: Order) -> Any:
    """Start an order (the same order id twice is the same run)."""
    return await place_order.start(order, idempotency_key=f"order:{order.id}",
                                   concurrency_key=order.customer)  # fmt: skip
