"""Typing cases checked by mypy (never run): a body whose parameters are annotated `Any`
(a connection typed `Any`, psycopg's `AsyncConnection[Any]`, an untyped argument) keeps
its result type through `step.transaction` and `step.run` (issue 31 item 10).

mypy answers `Any` for an overloaded call when an `Any` in an argument lets two overloads
match with different results; the async overloads take a `Coroutine`, which is what an
`async def` returns, so that both overloads see the same body type and the first wins.
"""

from __future__ import annotations

from typing import Any, assert_type

import psycopg
from pydantic import BaseModel

from durably import Durably, StepContext, SyncWorkflowContext, WorkflowContext

app = Durably("sqlite:///:memory:")


class Receipt(BaseModel):
    charged: int


async def pay(conn: Any, order_id: str) -> Receipt:
    return Receipt(charged=1)


def pay_sync(conn: Any, order_id: str) -> Receipt:
    return Receipt(charged=1)


async def pay_pg(conn: psycopg.AsyncConnection[Any], order_id: str) -> Receipt:
    return Receipt(charged=1)


async def pay_loose(conn: Any, order: Any) -> int:
    return 1


async def fetch(url: Any) -> bytes:
    return b""


async def beat(ctx: StepContext, what: Any) -> list[int]:
    return []


def beat_sync(ctx: StepContext, what: Any) -> list[int]:
    return []


@app.workflow(name="any-params", version="v1")
async def any_params(ctx: WorkflowContext, order_id: str) -> None:
    loose: Any = order_id
    assert_type(await ctx.step.transaction("pay", pay, order_id), Receipt)
    assert_type(await ctx.step.transaction("pay-sync", pay_sync, order_id), Receipt)
    assert_type(await ctx.step.transaction("pay-pg", pay_pg, order_id), Receipt)
    assert_type(await ctx.step.transaction("pay-loose", pay_loose, loose), int)
    assert_type(await ctx.step.run("fetch", fetch, loose), bytes)
    assert_type(await ctx.step.run("beat", beat, loose), list[int])
    assert_type(await ctx.step.run("beat-sync", beat_sync, loose), list[int])
    await ctx.step.transaction("pay", pay, 5)  # type: ignore[arg-type]
    _ = (await ctx.step.transaction("pay", pay, order_id)).upper()  # type: ignore[attr-defined]


@app.workflow(name="any-params-sync", version="v1")
def any_params_sync(ctx: SyncWorkflowContext, order_id: str) -> None:
    loose: Any = order_id
    assert_type(ctx.step.transaction("pay", pay, order_id), Receipt)
    assert_type(ctx.step.transaction("pay-sync", pay_sync, order_id), Receipt)
    assert_type(ctx.step.transaction("pay-pg", pay_pg, order_id), Receipt)
    assert_type(ctx.step.run("fetch", fetch, loose), bytes)
    assert_type(ctx.step.run("beat", beat, loose), list[int])
