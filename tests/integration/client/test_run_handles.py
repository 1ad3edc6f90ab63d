"""Handles on runs that exist: by run id, or by the business id a run was started with
(its idempotency key), in the app's namespace."""

from __future__ import annotations

from typing import Any

import pytest

from durably import Durably, InvalidInput, RunNotFound


async def test_a_run_handle_by_run_id_or_by_idempotency_key(db_url: str) -> None:
    app = Durably(db_url)
    elsewhere = Durably(db_url, namespace="elsewhere")  # the same key and name, another run

    @app.workflow(name="order")
    async def order(ctx: Any, n: int) -> int:
        return n

    @app.workflow(name="invoice")
    async def invoice(ctx: Any, n: int) -> int:
        return n

    @elsewhere.workflow(name="order")
    async def their_order(ctx: Any, n: int) -> int:
        return n

    async with app, elsewhere:
        ours = await order.start(1, idempotency_key="order-42", available_at="+1h")
        billed = await invoice.start(2, idempotency_key="order-42", available_at="+1h")
        theirs = await their_order.start(3, idempotency_key="order-42", available_at="+1h")

        by_id = await app.run_handle(ours.run_id)
        assert by_id.run_id == ours.run_id and by_id.run is not None and by_id.run.input == 1
        by_key = await app.run_handle(idempotency_key="order-42", workflow="order")
        assert by_key.run_id == ours.run_id and await by_key.status() == "pending"
        assert (await app.run_handle(idempotency_key="order-42", workflow="invoice")).run_id \
            == billed.run_id  # fmt: skip
        found = await elsewhere.run_handle(idempotency_key="order-42", workflow="order")
        assert found.run_id == theirs.run_id
        alone = await elsewhere.run_handle(idempotency_key="order-42")  # one workflow has it
        assert alone.run_id == theirs.run_id

        with pytest.raises(RunNotFound, match="no run with id 'no-such-run'"):
            await app.run_handle("no-such-run")
        with pytest.raises(RunNotFound, match="idempotency key 'order-43'"):
            await app.run_handle(idempotency_key="order-43", workflow="order")
        with pytest.raises(RunNotFound, match="idempotency key 'order-42'"):
            await app.run_handle(idempotency_key="order-42", workflow="refund")
        with pytest.raises(InvalidInput, match="invoice, order"):  # which one is meant?
            await app.run_handle(idempotency_key="order-42")
        with pytest.raises(TypeError):
            await app.run_handle()
        with pytest.raises(TypeError):
            await app.run_handle(ours.run_id, idempotency_key="order-42")


async def test_list_runs_by_idempotency_key(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="order")
    async def order(ctx: Any, n: int) -> int:
        return n

    async with app:
        wanted = await order.start(1, idempotency_key="order-42", available_at="+1h")
        await order.start(2, idempotency_key="order-43", available_at="+1h")
        await order.start(3, available_at="+1h")
        found = await app.list_runs(idempotency_key="order-42")
        assert [r.run_id for r in found] == [wanted.run_id]
