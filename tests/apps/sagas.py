"""A saga whose payment's refund (a `step.transaction` undo) can be held open, so a test
can kill its worker in the middle of it. Configured by environment: DURABLY_DATABASE_URL;
ENTERED_FILE, a file each refund appends its pid to once it has written (inside its
transaction); HOLD_FILE, while it exists a refund keeps its transaction open; RELEASED_FILE,
a file the stock's release (a function step's undo, run before the refund) appends to."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from typing import Any

import psycopg

from durably import Durably, WorkflowContext

URL = os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db")
app = Durably(URL)


def setup_business_tables(url: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS biz_payments (order_id TEXT, what TEXT)")
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS biz")
        conn.execute("CREATE TABLE IF NOT EXISTS biz.payments (order_id text, what text)")


def payments(url: str) -> list[tuple[str, str]]:
    """What the business table holds, as committed."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30) as conn:
            return list(conn.execute("SELECT order_id, what FROM biz_payments ORDER BY rowid"))
    with psycopg.connect(url) as conn:
        return list(conn.execute("SELECT order_id, what FROM biz.payments ORDER BY ctid"))


async def _write(conn: Any, order_id: str, what: str) -> None:
    if isinstance(conn, sqlite3.Connection):
        conn.execute("INSERT INTO biz_payments VALUES (?, ?)", (order_id, what))
    else:
        await conn.execute("INSERT INTO biz.payments VALUES (%s, %s)", (order_id, what))


async def charge(conn: Any, order_id: str) -> str:
    await _write(conn, order_id, "charge")
    return order_id


async def refund(conn: Any, order_id: str) -> None:
    await _write(conn, order_id, "refund")
    with open(os.environ["ENTERED_FILE"], "a") as out:
        out.write(f"{os.getpid()}\n")
    hold = os.environ.get("HOLD_FILE")
    while hold and os.path.exists(hold):  # the test kills this worker meanwhile
        await asyncio.sleep(0.02)


def reserve(order_id: str) -> str:
    return order_id


def release(order_id: str) -> None:
    with open(os.environ["RELEASED_FILE"], "a") as out:
        out.write(f"{order_id}\n")


@app.workflow(name="pay", version="v1")
async def pay(ctx: WorkflowContext, order_id: str) -> dict[str, Any]:
    await ctx.step.transaction("charge", charge, order_id, compensate=refund)
    await ctx.step.run("reserve", reserve, order_id, compensate=release)
    if not await ctx.step.wait_for_signal(f"approval:{order_id}"):
        undone = await ctx.step.compensate()
        return {"status": "rejected", "undone": undone}
    return {"status": "paid"}
