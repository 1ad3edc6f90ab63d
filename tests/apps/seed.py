"""The seed record's spike, as a durably app: every step body appends to a business
ledger (its own table, written outside the engine) so tests can see what ran, where and
how often. Configured by environment: DURABLY_DATABASE_URL, WF_VERSION, WORKER_NAME,
COPY_SECONDS (how long `copy-file` takes), LEDGER_URL (where the ledger is written; default
the engine's database: a worker whose engine connection goes through a faulty network can
keep a reliable ledger), TICK_SECONDS (how long `ticker` ticks)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from typing import Any

import psycopg
from pydantic import BaseModel

from durably import Durably, RetryPolicy, StepContext, SyncWorkflowContext
from tests.helpers import scaled

URL = os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db")
LEDGER_URL = os.environ.get("LEDGER_URL") or URL
app = Durably(URL)
VERSION = os.environ.get("WF_VERSION", "v1")
WORKER = os.environ.get("WORKER_NAME", "?")


def _sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def setup_business_tables(url: str = URL) -> None:
    """The application's own tables, in their own schema (PostgreSQL) or prefix (SQLite)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(url)) as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS biz_ledger (run_id TEXT, step TEXT,"
                " worker TEXT, event TEXT, fence INTEGER, at REAL)"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS biz_library (order_id TEXT PRIMARY KEY,"
                " path TEXT, run_id TEXT, fence INTEGER)"
            )
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS biz")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS biz.ledger (run_id text, step text,"
            " worker text, event text, fence bigint, at timestamptz DEFAULT now())"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS biz.library (order_id text PRIMARY KEY,"
            " path text, run_id text, fence bigint)"
        )


def ledger(ctx: StepContext, event: str = "run") -> None:
    """Append one line to the business ledger, on a connection of its own."""
    row = (ctx.run_id, ctx.step, WORKER, event, ctx.fence.fence)
    if LEDGER_URL.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(LEDGER_URL), timeout=scaled(30)) as conn:
            conn.execute("INSERT INTO biz_ledger VALUES (?, ?, ?, ?, ?, ?)", (*row, time.time()))
    else:
        with psycopg.connect(LEDGER_URL, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO biz.ledger (run_id, step, worker, event, fence)"
                " VALUES (%s, %s, %s, %s, %s)",
                row,
            )


def read_ledger(url: str = URL) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(url)) as conn:
            return list(
                conn.execute(
                    "SELECT run_id, step, worker, event, fence FROM biz_ledger ORDER BY at, rowid"
                )
            )
    with psycopg.connect(url) as conn:
        return list(
            conn.execute("SELECT run_id, step, worker, event, fence FROM biz.ledger ORDER BY at")
        )


def read_library(url: str = URL) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(url)) as conn:
            return list(conn.execute("SELECT order_id, path, run_id FROM biz_library"))
    with psycopg.connect(url) as conn:
        return list(conn.execute("SELECT order_id, path, run_id FROM biz.library"))


class Order(BaseModel):
    id: str


def submit(ctx: StepContext, order_id: str) -> dict[str, str]:
    ledger(ctx)
    return {"torrent_hash": f"hash-{order_id}"}


def copy(ctx: StepContext, order_id: str) -> dict[str, str]:
    ledger(ctx, "start")
    deadline = time.monotonic() + float(os.environ.get("COPY_SECONDS", "0"))
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    ledger(ctx, "end")
    return {"dest": f"/lib/{order_id}.mkv"}


async def register(conn: Any, order_id: str, dest: str, run_id: str) -> str:
    sql = "INSERT INTO {t} (order_id, path, run_id) VALUES ({p}, {p}, {p})"
    if isinstance(conn, sqlite3.Connection):
        conn.execute(sql.format(t="biz_library", p="?"), (order_id, dest, run_id))
    else:
        await conn.execute(sql.format(t="biz.library", p="%s"), (order_id, dest, run_id))
    return dest


def cleanup(ctx: StepContext) -> None:
    ledger(ctx)


@app.workflow(name="acquire", version=VERSION)
async def acquire(ctx: Any, order: Order) -> dict[str, Any]:
    sub = await ctx.step.run("submit-download", submit, order.id)
    sig = await ctx.step.wait_for_signal(f"download-done:{order.id}", timeout="1h")
    if VERSION == "v2-extra":
        await ctx.step.run("v2-extra-verify", ledger)
    copied = await ctx.step.run("copy-file", copy, order.id)
    await ctx.step.transaction("register", register, order.id, copied["dest"], ctx.run_id)
    await ctx.step.sleep("retention", os.environ.get("RETENTION", "0.2s"))
    await ctx.step.run("cleanup", cleanup)
    return {"sub": sub, "copied": copied, "signal": sig}


@app.workflow(name="acquire-sync", version="v1")
def acquire_sync(ctx: SyncWorkflowContext, order: Order) -> dict[str, Any]:
    """`acquire` as a sync workflow (a plain `def`): the same steps, each call blocking."""
    sub = ctx.step.run("submit-download", submit, order.id)
    sig = ctx.step.wait_for_signal(f"download-done:{order.id}", timeout="1h")
    copied = ctx.step.run("copy-file", copy, order.id)
    ctx.step.transaction("register", register, order.id, copied["dest"], ctx.run_id)
    ctx.step.sleep("retention", os.environ.get("RETENTION", "0.2s"))
    ctx.step.run("cleanup", cleanup)
    return {"sub": sub, "copied": copied, "signal": sig}


def undo_ledger(ctx: StepContext, _: Any) -> None:
    ledger(ctx, "undo")


@app.workflow(name="renamed", version="v1")
async def renamed(ctx: Any) -> str:
    first = "first-renamed" if os.environ.get("RENAMED") else "first"  # a deploy mistake
    await ctx.step.run(first, ledger, compensate=undo_ledger)
    await ctx.step.sleep("nap", os.environ.get("NAP", "1s"))
    await ctx.step.run("second", ledger)
    return "done"


@app.workflow(name="burst", version="v1")
async def burst(ctx: Any, n: int) -> int:
    for i in range(3):
        await ctx.step.run(f"s{i}", ledger)
    return n


def flaky_body(ctx: StepContext, fail_times: int) -> int:
    ledger(ctx)
    if ctx.attempt <= fail_times:
        raise RuntimeError(f"boom attempt {ctx.attempt}")
    return ctx.attempt


@app.workflow(name="flaky", version="v1")
async def flaky(ctx: Any, fail_times: int) -> int:
    policy = RetryPolicy(max_attempts=3, initial_interval="50ms")
    return int(await ctx.step.run("flaky-step", flaky_body, fail_times, retry=policy))


async def long_async(ctx: StepContext) -> None:
    await asyncio.to_thread(ledger, ctx, "start")
    await asyncio.sleep(60)
    await asyncio.to_thread(ledger, ctx, "end")


def long_sync(ctx: StepContext) -> None:
    ledger(ctx, "start")
    while not ctx.cancelled.wait(0.01):
        pass
    ledger(ctx, "stopped")


async def fence_out(ctx: StepContext) -> None:
    """Hands its fence to the outside world (the ledger) at once; the first time, the worker
    then freezes on the spot, before its event loop can write anything more (SIGSTOP)."""
    first = not any(line[0] == ctx.run_id for line in read_ledger(LEDGER_URL))
    ledger(ctx, "start")
    if first:
        os.kill(os.getpid(), signal.SIGSTOP)


@app.workflow(name="fence-out", version="v1")
async def fence_out_flow(ctx: Any) -> str:
    await ctx.step.run("fence-out", fence_out)
    return "done"


async def held_register(conn: Any, run_id: str) -> str:
    """The run's one library row, written inside the step's transaction (PostgreSQL). The
    first attempt then says so in the file TX_MARKER and waits, its transaction open, for
    the test to freeze its worker (SIGSTOP, or a silent network)."""
    await conn.execute(
        "INSERT INTO biz.library (order_id, path, run_id) VALUES (%s, %s, %s)",
        (run_id, WORKER, run_id),
    )
    marker = os.environ["TX_MARKER"]
    if not os.path.exists(marker):
        with open(marker, "w") as out:
            out.write(WORKER)
        await asyncio.sleep(scaled(120))
    return WORKER


@app.workflow(name="tx-freeze", version="v1")
async def tx_freeze(ctx: Any) -> str:
    return str(await ctx.step.transaction("register", held_register, ctx.run_id))


@app.workflow(name="slow", version="v1")
async def slow(ctx: Any, mode: str) -> None:
    await ctx.step.run("long", long_async if mode == "async" else long_sync)
    await ctx.step.run("after-long", ledger)


@app.workflow(name="slow-sync", version="v1")
def slow_sync(ctx: SyncWorkflowContext, mode: str) -> None:
    """`slow` as a sync workflow."""
    ctx.step.run("long", long_async if mode == "async" else long_sync)
    ctx.step.run("after-long", ledger)


def uninterruptible(seconds: float) -> str:
    """A sync body that ignores cancellation (as most blocking code does): it marks its
    start and end in EFFECT_FILE, one appended line each (worker, event, wall time). With
    GO_FILE, its `seconds` count from when that file appears (the test's cue), not from
    its start, so a slow machine cannot end it before the test has done its part."""
    path = os.environ["EFFECT_FILE"]
    with open(path, "a") as f:
        f.write(f"{WORKER} start {time.time()!r}\n")
    go, until = os.environ.get("GO_FILE"), time.monotonic() + 120
    while go and not os.path.exists(go) and time.monotonic() < until:
        time.sleep(0.01)
    time.sleep(seconds)
    with open(path, "a") as f:
        f.write(f"{WORKER} end {time.time()!r}\n")
    return WORKER


@app.workflow(name="stubborn", version="v1")
async def stubborn(ctx: Any, seconds: float) -> str:
    ran = await ctx.step.run("uninterruptible", uninterruptible, seconds)
    await ctx.step.run("after", ledger)
    return str(ran)


@app.workflow(name="sleeper", version="v1")
async def sleeper(ctx: Any, seconds: float) -> str:
    await ctx.step.run("before", ledger)
    await ctx.step.sleep("retention", seconds)
    await ctx.step.run("after", ledger)
    return "woke"


def saga_do(ctx: StepContext, name: str) -> str:
    ledger(ctx)
    return name


def saga_undo(ctx: StepContext, name: str) -> None:
    marker = os.environ.get("KILL_IN_UNDO")
    if name == "a" and marker and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), 9)  # the worker dies between two compensations
    ledger(ctx, f"undo-{name}")


def boom() -> None:
    raise RuntimeError("boom")


@app.workflow(name="saga", version="v1")
async def saga(ctx: Any) -> None:
    await ctx.step.run("a", saga_do, "a", compensate=saga_undo)
    await ctx.step.run("b", saga_do, "b", compensate=saga_undo)
    await ctx.step.run("boom", boom, retry=RetryPolicy(max_attempts=1))


TICK_S = 0.1


def tick(ctx: StepContext) -> None:
    """A long body: a ledger line every tick, "stopped" if interrupted, "end" if not."""
    ledger(ctx, "start")
    deadline = time.monotonic() + float(os.environ.get("TICK_SECONDS", "60"))
    while time.monotonic() < deadline:
        if ctx.cancelled.wait(TICK_S):
            ledger(ctx, "stopped")
            return
        ledger(ctx, "tick")
    ledger(ctx, "end")


@app.workflow(name="ticker", version="v1")
async def ticker(ctx: Any) -> None:
    await ctx.step.run("ticking", tick)


# ----- continue-as-new (SPEC §4.23) -----
CHAIN_LAST = 6


def _generation(gen: int) -> int:
    return gen


@app.workflow(name="chain", version="v1")
async def chain(ctx: Any, gen: int) -> int:
    """Generations 0..CHAIN_LAST, each continuing as the next; KILL_AT_CONTINUE (a marker
    path): the worker dies as generation 3 is about to continue, once."""
    got = await ctx.step.run("generation", _generation, gen)
    marker = os.environ.get("KILL_AT_CONTINUE")
    if gen == 3 and marker and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), 9)
    if got < CHAIN_LAST:
        ctx.continue_as_new(got + 1)
    return int(got)


# ----- search attributes (SPEC §4.24) -----
@app.workflow(name="tagged", version="v1")
async def tagged(ctx: Any, n: int) -> int:
    """Sets attributes twice; KILL_AFTER_ATTRIBUTES (a marker path): the worker dies just
    after the first set, once (its record and merge committed), for another to replay."""
    await ctx.step.set_attributes({"stage": "first", "n": n})
    marker = os.environ.get("KILL_AFTER_ATTRIBUTES")
    if n == 0 and marker and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), 9)
    await ctx.step.run("work", _generation, n)
    await ctx.step.set_attributes({"stage": "done", "by": WORKER})
    return n
