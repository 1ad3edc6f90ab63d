"""The soak's workflows: what the worker processes run (`chaos.plans` says what each run
must end as, `chaos.load` starts them).

Every step body (and every compensation) notes each execution in the ledger (`ledger`);
`step.transaction` bodies write one row into the business table instead, inside the
engine's transaction.

Configured by environment (workers and the soak alike): DURABLY_DATABASE_URL, WORKER_NAME,
CHAOS_LEDGER (the ledger directory), CHAOS_PLANT (a planted fault, see `PLANTS`),
CHAOS_DEPLOY (the deploy a worker process runs, see `DEPLOYS`; the soak itself is "new").
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from durably import (
    ChildWorkflowError,
    Durably,
    NonRetryableError,
    RetryPolicy,
    StepContext,
    StepFailedError,
    WorkflowContext,
    WorkflowTimeoutError,
)

from .ledger import WORKER, note

app = Durably(os.environ.get("DURABLY_DATABASE_URL"))
PLANT = os.environ.get("CHAOS_PLANT", "")
PLANTS = {
    "double-signal": "the load generator delivers one buffered signal twice",
    "outside-tx": "a transaction body that rolls back once writes its row outside the transaction",
    "stream-reread": "a stream's reader, cut once, reads again from the start, not its offset",
}
# A rolling deploy: worker processes of the old deploy run beside those of the new one. The
# old deploy predates chaos-saga and has the previous version of chaos-signals; the load
# generator starts runs as the new deploy does. Every workflow not named is v1 in both.
DEPLOYS: dict[str, dict[str, str | None]] = {
    "new": {"chaos-signals": "v2"},
    "old": {"chaos-signals": "v1", "chaos-saga": None},
}
DEPLOY = os.environ.get("CHAOS_DEPLOY", "new")
ONCE = RetryPolicy(max_attempts=1)
QUICK = RetryPolicy(max_attempts=6, initial_interval="100ms", maximum_interval="1s")

# ------------------------------------------------------------------ step bodies


def work(ctx: StepContext, value: int, millis: int) -> int:
    """A sync body (runs in a thread) that takes `millis` and can be interrupted."""
    note(ctx, "start")
    deadline = time.monotonic() + millis / 1000
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.005)
    return value


async def awork(ctx: StepContext, value: int, millis: int) -> int:
    """An async body; with `millis` 0 it never yields to the event loop."""
    note(ctx, "start")
    if millis:
        await asyncio.sleep(millis / 1000)
    return value


def flaky(ctx: StepContext, failures: int, exits: bool = False) -> str:
    """Fails its first `failures` attempts; with `exits`, as argparse does (SystemExit),
    which must be retried by the same policy and never stop the worker."""
    note(ctx, "start")
    if ctx.attempt <= failures:
        note(ctx, "fail")  # a designed failure: not an extra execution
        if exits:
            raise SystemExit(2)
        raise RuntimeError(f"planned failure of attempt {ctx.attempt}")
    return "flaky-ok"


def doomed(ctx: StepContext, exits: bool = False) -> None:
    """Fails (run with `ONCE`: for good); with `exits`, by SystemExit."""
    note(ctx, "start")
    note(ctx, "fail")
    if exits:
        raise SystemExit("planned exit")
    raise NonRetryableError("planned failure")


def act(ctx: StepContext, what: str) -> str:
    note(ctx, "start")
    return what


def undo(ctx: StepContext, value: str) -> None:
    note(ctx, "start")


async def book(conn: Any, run_id: str, step: str, roll_back_once: bool) -> str:
    """A `step.transaction` body: one business row, in the engine's transaction.

    `roll_back_once` makes its first attempt fail after writing (a marker file, outside the
    database, remembers it did), so the rollback must take the row away again.
    """
    if isinstance(conn, sqlite3.Connection):
        conn.execute("INSERT INTO chaos_effects VALUES (?, ?)", (run_id, step))
    elif PLANT == "outside-tx" and roll_back_once:  # planted: a connection of its own
        async with await psycopg.AsyncConnection.connect(app.url, autocommit=True) as own:
            await own.execute("INSERT INTO chaos_biz.effects VALUES (%s, %s)", (run_id, step))
    else:
        await conn.execute("INSERT INTO chaos_biz.effects VALUES (%s, %s)", (run_id, step))
        await _hold_for_a_freeze(run_id)
    if roll_back_once:
        marker = Path(os.environ["CHAOS_LEDGER"]) / f"rolled-back-{run_id}-{step}"
        if not marker.exists():
            marker.touch()
            raise RuntimeError("planned rollback")
    return f"booked:{step}"


async def _hold_for_a_freeze(run_id: str) -> None:
    """The fault `sigstop-in-tx` asks (a file `hold-tx-<worker>`) that the next transaction
    body of this worker wait inside its transaction, its row written, for the worker to be
    frozen there: the body takes the request, says which run it holds (`inside-tx-<worker>`)
    and waits until the fault removes that file (or 20 s)."""
    folder = Path(os.environ["CHAOS_LEDGER"])
    try:
        (folder / f"hold-tx-{WORKER}").unlink()  # one body takes it
    except FileNotFoundError:
        return
    inside = folder / f"inside-tx-{WORKER}"
    (folder / f"{inside.name}.new").write_text(run_id)
    (folder / f"{inside.name}.new").rename(inside)
    until = time.monotonic() + 20
    while inside.exists() and time.monotonic() < until:
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------ workflows


def version_in(deploy: str, workflow: str) -> str | None:
    """The version of `workflow` that `deploy` registers (None: it has no such workflow)."""
    return DEPLOYS[deploy].get(workflow, "v1")


def deployed(name: str) -> Callable[[Callable[..., Any]], object]:
    """`app.workflow(name=name)` at this process's deploy's version; a workflow its deploy
    does not have stays a plain function, so its workers never claim its runs."""
    version = version_in(DEPLOY, name)
    return app.workflow(name=name, version=version) if version else lambda fn: fn


@app.workflow(name="chaos-steps")
async def steps_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Sequential steps, one retried until it succeeds, one failure caught."""
    out: list[Any] = []
    for i, (value, millis) in enumerate(spec["steps"]):
        out.append(await ctx.step.run(f"s{i}", work, value, millis))
    exits = bool(spec.get("exits"))  # its failures are SystemExit
    if spec["flaky"] is not None:
        out.append(await ctx.step.run("flaky", flaky, spec["flaky"], exits, retry=QUICK))
    if spec["caught"]:
        try:
            await ctx.step.run("doomed", doomed, exits, retry=ONCE)
        except StepFailedError:
            out.append("caught")
    return out


@app.workflow(name="chaos-gather")
async def gather_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Concurrent branches that each run several steps (and sleeps)."""

    async def branch(b: int, items: list[list[Any]]) -> list[Any]:
        out: list[Any] = []
        for j, (kind, value, millis) in enumerate(items):
            if kind == "z":
                await ctx.step.sleep(f"b{b}z{j}", f"{millis}ms")
                out.append(None)
            else:
                out.append(await ctx.step.run(f"b{b}s{j}", awork, value, millis))
        return out

    # A variable, not `return await ...`: the return type as context makes mypy pick
    # gather's overloads with Any (as it does for asyncio.gather).
    results = await ctx.gather(*(branch(b, items) for b, items in enumerate(spec["branches"])))
    return results


@deployed("chaos-signals")
async def signals_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Two signals on one topic (received in send order), then one sent to itself."""
    topic = spec["topic"]
    first = await ctx.step.wait_for_signal(topic, name="wait-1")
    await ctx.step.run("between", work, 0, 20)
    second = await ctx.step.wait_for_signal(topic, name="wait-2")
    own = f"{topic}:own"
    _, mine = await ctx.gather(
        ctx.step.send_signal(own, {"own": topic}, name="send-own"),
        ctx.step.wait_for_signal(own, name="wait-own"),
    )
    return [first, second, mine]


@app.workflow(name="chaos-requests")
async def requests_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Answer two requests (SPEC §4.22), with a step between taking each and replying."""
    answered = []
    for i in range(2):
        req = await ctx.step.wait_for_request("ask", timeout="10m")
        assert req is not None, "no request came in ten minutes"
        await ctx.step.run(f"think-{i}", work, 0, 20)
        await ctx.step.reply(req, {"n": req.data["n"], "by": ctx.run_id})
        answered.append(req.data["n"])
    return answered


@app.workflow(name="chaos-stream")
async def stream_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> int:
    """Write 0..n-1 to stream "s" (SPEC §4.21), a step between some, then close it."""
    for i in range(spec["n"]):
        if i in spec["pauses"]:
            await ctx.step.run(f"pause-{i}", work, i, spec["millis"])
        await ctx.step.write_stream("s", i)
    await ctx.step.close_stream("s")
    return int(spec["n"])


@app.workflow(name="chaos-child")
async def child_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> Any:
    if spec["mode"] == "slow":
        await ctx.step.sleep("slow", "60s")
    if spec["mode"] == "fail":
        await ctx.step.run("child-doomed", doomed, retry=ONCE)
    return await ctx.step.run("child-step", work, spec["value"], 0)


@app.workflow(name="chaos-children")
async def children_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Three children started at once: one completes, one fails, one times out."""
    ok = ctx.step.start_workflow(child_wf, {"mode": "ok", "value": spec["value"]}, name="ok")
    bad = ctx.step.start_workflow(child_wf, {"mode": "fail", "value": ""}, name="bad")
    slow = ctx.step.start_workflow(
        child_wf, {"mode": "slow", "value": ""}, name="slow", timeout=f"{spec['timeout_ms']}ms"
    )
    out = [await ok]
    try:
        await bad
        out.append("no error")
    except ChildWorkflowError:
        out.append("child failed")
    try:
        await slow
        out.append("no timeout")
    except WorkflowTimeoutError:
        out.append("timed out")
    return out


@app.workflow(name="chaos-ledger")
async def ledger_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """`step.transaction` writes to the business table, between ordinary steps."""
    out: list[Any] = []
    for i in range(spec["n"]):
        rollback = i == spec["roll_back_once"]
        out.append(await ctx.step.transaction(f"t{i}", book, ctx.run_id, f"t{i}", rollback,
                                              retry=QUICK))  # fmt: skip
        out.append(await ctx.step.run(f"w{i}", work, i, 10))
    return out


@deployed("chaos-saga")
async def saga_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> str:
    """Two compensable steps, then: fail for good, hold (to be canceled), or ship."""
    await ctx.step.run("reserve", act, "reserve", compensate=undo)
    await ctx.step.run("charge", act, "charge", compensate=undo)
    if spec["end"] == "fail":
        await ctx.step.run("ship", doomed, bool(spec.get("exits")), retry=ONCE)
    if spec["end"] == "hold":
        await ctx.step.sleep("hold", f"{spec['hold_ms']}ms")
    return str(await ctx.step.run("ship", act, "shipped"))


@app.workflow(name="chaos-deadline")
async def deadline_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> str:
    """A compensable step, then a sleep far past the run's deadline."""
    await ctx.step.run("prepare", act, "prepare", compensate=undo)
    await ctx.step.sleep("too-long", "60s")
    return str(await ctx.step.run("never", act, "never"))


@app.workflow(name="chaos-chain")
async def chain_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> int:
    """Continue-as-new (SPEC §4.23): generation `gen` runs one step and continues as the
    next, the last returns the sum of every generation's value."""
    got: int = await ctx.step.run("generation", work, spec["values"][spec["gen"]], spec["millis"])
    total = int(spec["total"]) + got
    if spec["gen"] < len(spec["values"]) - 1:
        ctx.continue_as_new({**spec, "gen": spec["gen"] + 1, "total": total})
    return total
