"""Typing cases checked by mypy (never run): the step API keeps a body's types.

A `# type: ignore[code]` line is a call mypy must reject with that code.
"""

from __future__ import annotations

import sqlite3
from typing import Any, assert_type

import psycopg

from durably import Durably, StepContext, WorkflowContext

app = Durably("sqlite:///:memory:")


def add(a: int, b: int = 1) -> int:
    return a + b


async def fetch(url: str) -> bytes:
    return url.encode()


def copy(ctx: StepContext, src: str, dst: str) -> str:
    ctx.raise_if_cancelled()
    return dst


async def heartbeat(ctx: StepContext, n: int) -> list[int]:
    ctx.heartbeat()
    return [n]


def register(conn: sqlite3.Connection, order_id: str) -> int:
    return conn.execute("SELECT ?", (order_id,)).fetchone()[0]  # type: ignore[no-any-return]


async def register_async(conn: psycopg.AsyncConnection[Any], order_id: str) -> str:
    return order_id


def undo(value: int) -> None:
    pass


def unregister(conn: sqlite3.Connection, registered: int) -> None:
    conn.execute("DELETE FROM t WHERE id = ?", (registered,))


def unregister_by_name(conn: sqlite3.Connection, registered: str) -> None:
    pass


async def unregister_async(conn: psycopg.AsyncConnection[Any], registered: str) -> None:
    pass


@app.workflow(name="steps", version="v1")
async def steps(ctx: WorkflowContext, order_id: str) -> None:
    assert_type(await ctx.step.run("add", add, 1), int)
    assert_type(await ctx.step.run("add2", add, 1, 2, retry=None, compensate=undo), int)
    assert_type(await ctx.step.run("fetch", fetch, "https://x", timeout="5s"), bytes)
    assert_type(await ctx.step.run("copy", copy, "a", "b"), str)
    assert_type(await ctx.step.run("beat", heartbeat, 3), list[int])
    assert_type(await ctx.step.transaction("reg", register, order_id), int)
    # psycopg's connection type holds `Any`: the result keeps its type (cases_any_params).
    assert_type(await ctx.step.transaction("reg2", register_async, order_id), str)
    # A transaction's undo takes the body's connection type and its result.
    assert_type(await ctx.step.transaction("reg3", register, order_id, compensate=unregister), int)
    assert_type(
        await ctx.step.transaction("reg4", register_async, order_id,
                                   compensate=unregister_async), str
    )  # fmt: skip
    assert_type(await ctx.step.compensate(), list[str])
    assert_type(await ctx.step.sleep("nap", "7 days"), None)
    assert_type(await ctx.step.wait_for_signal("go", timeout="1h"), Any)
    assert_type(ctx.run_id, str)

    await ctx.step.run("add", add, "1")  # type: ignore[arg-type]
    await ctx.step.run("add", add)  # type: ignore[call-arg, arg-type]
    await ctx.step.run("add", add, 1, 2, 3)  # type: ignore[call-arg, arg-type]
    await ctx.step.run("fetch", fetch, 42)  # type: ignore[arg-type]
    await ctx.step.run("copy", copy, "a")  # type: ignore[arg-type]
    await ctx.step.run("add", add, 1, retry="3")  # type: ignore[call-overload]
    await ctx.step.transaction("reg", register, 5)  # type: ignore[arg-type]
    await ctx.step.transaction("reg", register, order_id, compensate=unregister_by_name)  # type: ignore[arg-type]
    await ctx.step.transaction("reg", register, order_id, compensate=undo)  # type: ignore[arg-type]
    _ = (await ctx.step.run("add", add, 1)).upper()  # type: ignore[attr-defined]
