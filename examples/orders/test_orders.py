"""The order service under `durably.testing`: two days of waiting take no time."""

from __future__ import annotations

from datetime import timedelta

import pytest

import orders
import shop
from durably import InvalidInput, RunFailedError
from durably.testing import Environment
from orders import Item, Order, Outcome


def order(id: str = "o-1", customer: str = "c-1", *skus: str) -> Order:
    items = [Item(sku=s, quantity=1) for s in skus or ("book", "lamp")]
    return Order(id=id, customer=customer, items=items, amount=4200)


def payments(env: Environment) -> list[tuple[object, ...]]:
    return shop.rows(env.app.url, "payments")


async def test_an_approved_order_ships_every_item(env: Environment) -> None:
    handle = await orders.place(order())
    await env.app.send_signal("approval:o-1", {"approved": True, "by": "ana"})
    assert await handle.result() == Outcome(
        order_id="o-1", status="shipped", shipped=["book", "lamp"]
    )
    assert payments(env) == [("o-1", "charge", 4200)]
    assert shop.rows(env.app.url, "stock_holds") == [("o-1", "book,lamp")]
    assert shop.rows(env.app.url, "shipments") == [("o-1", "book"), ("o-1", "lamp")]
    assert orders.notices == {"o-1": 2}  # the mail server failed once; retried


async def test_a_rejected_order_is_refunded_and_its_stock_released(env: Environment) -> None:
    handle = await orders.place(order())
    await env.app.send_signal("approval:o-1", {"approved": False, "by": "ana"})
    outcome = await handle.result()
    assert outcome.status == "rejected"
    assert outcome.undone == ["charge-payment", "reserve-stock"]
    assert payments(env) == [("o-1", "charge", 4200), ("o-1", "refund", -4200)]
    assert shop.rows(env.app.url, "stock_holds") == []
    assert shop.rows(env.app.url, "shipments") == []


async def test_an_order_nobody_approves_expires_after_two_days(env: Environment) -> None:
    handle = await orders.place(order())
    outcome = await handle.result()
    assert outcome.status == "expired"  # two days skipped
    assert outcome.undone == ["charge-payment", "reserve-stock"]
    assert env.now() - (await handle.get()).created_at >= timedelta(days=2)
    assert payments(env) == [("o-1", "charge", 4200), ("o-1", "refund", -4200)]
    assert shop.rows(env.app.url, "stock_holds") == []


async def test_a_canceled_order_is_undone_once(env: Environment) -> None:
    handle = await orders.place(order())
    await env.wait_until_idle()  # charged, waiting for the approval
    assert (await handle.get()).waiting_for == "signal:approval:o-1"
    await env.app.cancel(handle.run_id)
    with pytest.raises(RunFailedError, match="cancel"):
        await handle.result()
    assert payments(env) == [("o-1", "charge", 4200), ("o-1", "refund", -4200)]
    assert shop.rows(env.app.url, "stock_holds") == []


async def test_one_customers_orders_queue_and_all_ship(env: Environment) -> None:
    first, second = await orders.place(order("o-1")), await orders.place(order("o-2"))
    for id in ("o-1", "o-2"):
        await env.app.send_signal(f"approval:{id}", {"approved": True, "by": "ana"})
    assert [(await h.result()).status for h in (first, second)] == ["shipped", "shipped"]


async def test_the_same_order_twice_is_one_run(env: Environment) -> None:
    assert (await orders.place(order())).run_id == (await orders.place(order())).run_id


async def test_an_invalid_order_is_refused_and_nothing_starts(env: Environment) -> None:
    with pytest.raises(InvalidInput, match="items"):
        await orders.place_order.start({"id": "o-9", "customer": "c", "items": [], "amount": 1})
    assert await env.app.list_runs() == []


async def test_an_approval_that_does_not_fit_fails_at_the_wait(env: Environment) -> None:
    handle = await orders.place(order())
    await env.app.send_signal("approval:o-1", {"approved": "maybe"})
    with pytest.raises(Exception, match="approved"):
        await handle.result()
    # the order failed for good: what it did is undone
    assert payments(env) == [("o-1", "charge", 4200), ("o-1", "refund", -4200)]


async def test_the_morning_report_sums_the_payments(env: Environment) -> None:
    await orders.place(order())
    await env.wait_until_idle()
    report = await orders.daily_report.start({"scheduled_at": "2026-12-03T05:00:00+00:00"})
    assert await report.result() == 4200
