"""Generated workflow programs for the replay-equivalence test, on the seed app.

A program is a tree built deterministically from a seed: sequences and gathers of
branches that each run several steps, sleeps, caught failures, signals sent to the run
itself (before or after the wait), and children. `expected(seed)` evaluates the same tree
without the engine; the `program` workflow runs it with durable steps, whose bodies log
each execution to the seed app's business ledger. Run uninterrupted or with workers killed
at random points, a program must end with `expected(seed)`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from durably import (
    NonRetryableError,
    RetryPolicy,
    StepContext,
    SyncWorkflowContext,
    WorkflowContext,
)
from tests.apps.seed import app, ledger

Node = list[Any]
ONCE = RetryPolicy(max_attempts=1)


def build(seed: int, depth: int = 0, counter: list[int] | None = None) -> Node:
    """A random program; step names are unique within it."""
    rng = random.Random(seed * 7919 + depth)
    counter = counter if counter is not None else [0]

    def name(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def node(level: int) -> Node:
        roll = rng.random()
        if level < 2 and roll < 0.25:
            return ["gather", [node(level + 1) for _ in range(rng.randint(2, 3))]]
        if level < 2 and roll < 0.4:
            return ["seq", [node(level + 1) for _ in range(rng.randint(2, 3))]]
        if roll < 0.5:
            return ["sleep", name("z"), rng.choice([0, 30, 80])]
        if roll < 0.58:
            return ["fail", name("f")]
        if roll < 0.66:
            return ["signal", name("s"), rng.random() < 0.5]
        if roll < 0.7 and depth == 0:
            return ["child", rng.randrange(10**6)]
        return ["step", name("x"), rng.randrange(1000), rng.choice([0, 0, 20, 60, 150])]

    return ["seq", [node(0) for _ in range(rng.randint(3, 5))]]


def evaluate(tree: Node) -> Any:
    """What a program returns, computed without the engine."""
    kind = tree[0]
    if kind in ("seq", "gather"):
        return [evaluate(t) for t in tree[1]]
    if kind == "step":
        return tree[2]
    if kind == "sleep":
        return None
    if kind == "fail":
        return "caught"
    if kind == "signal":
        return {"sent": tree[1]}
    return evaluate(build(tree[1], depth=1))


def expected(seed: int) -> Any:
    return evaluate(build(seed))


def history(tree: Node) -> list[tuple[str, str, str]]:
    """The steps a program records, as (name, kind, final status)."""
    kind = tree[0]
    if kind in ("seq", "gather"):
        return [h for t in tree[1] for h in history(t)]
    if kind == "step":
        return [(tree[1], "function", "completed")]
    if kind == "sleep":
        return [(tree[1], "sleep", "completed")]
    if kind == "fail":
        return [(tree[1], "function", "failed")]
    if kind == "signal":
        return [(f"send-{tree[1]}", "signal-send", "completed"),
                (f"wait-{tree[1]}", "signal-wait", "completed")]  # fmt: skip
    return [(f"child-{tree[1]}", "child", "completed")]


def body(ctx: StepContext, value: int, millis: int) -> int:
    ledger(ctx, "run")
    deadline = time.monotonic() + millis / 1000
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.005)
    ledger(ctx, "end")
    return value


def broken(ctx: StepContext) -> None:
    ledger(ctx, "run")
    raise NonRetryableError("planned failure")


async def run_tree(ctx: Any, tree: Node) -> Any:
    kind = tree[0]
    if kind == "seq":
        return [await run_tree(ctx, t) for t in tree[1]]
    if kind == "gather":
        return await ctx.gather(*(run_tree(ctx, t) for t in tree[1]))
    if kind == "step":
        return await ctx.step.run(tree[1], body, tree[2], tree[3])
    if kind == "sleep":
        return await ctx.step.sleep(tree[1], f"{tree[2]}ms")
    if kind == "fail":
        try:
            await ctx.step.run(tree[1], broken, retry=ONCE)
        except Exception:
            return "caught"
        return "not caught"
    if kind == "signal":
        topic = f"{ctx.run_id}:{tree[1]}"
        send = ctx.step.send_signal(topic, {"sent": tree[1]}, name=f"send-{tree[1]}")
        wait = ctx.step.wait_for_signal(topic, name=f"wait-{tree[1]}")
        if tree[2]:  # the send first: the wait takes a buffered signal
            _, data = await ctx.gather(send, wait)
        else:
            data, _ = await ctx.gather(wait, send)
        return data
    return await ctx.step.run_workflow(program, {"seed": tree[1], "depth": 1},
                                       name=f"child-{tree[1]}")  # fmt: skip


@app.workflow(name="program", version="v1")
async def program(ctx: Any, spec: dict[str, int]) -> Any:
    return await run_tree(ctx, build(spec["seed"], depth=spec.get("depth", 0)))


def charge(ctx: StepContext) -> str:
    ledger(ctx, "run")
    return "charged"


def slow_copy(ctx: StepContext, marker: str) -> str:
    ledger(ctx, "start")
    while not Path(marker).exists():
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    ledger(ctx, "end")
    return "copied"


@app.workflow(name="pair", version="v1")
async def pair(ctx: Any, marker: str) -> Any:
    """A fast step beside a slow sibling: the fast one's record must not wait for it."""
    return await ctx.gather(ctx.step.run("charge", charge), ctx.step.run("copy", slow_copy, marker))


def use_values(ctx: StepContext, marker: str, token: str) -> str:
    """Logs the values it was handed, then waits for `marker` (a worker can be killed here)."""
    ledger(ctx, f"start:{token}")
    while not Path(marker).exists():
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    return token


@app.workflow(name="values", version="v1")
async def values(ctx: WorkflowContext, marker: str) -> list[str]:
    """Values read before a step that uses them, and one more after it."""
    read = [ctx.now().isoformat(), repr(ctx.random()), str(ctx.uuid4())]
    await ctx.step.run("use", use_values, marker, "|".join(read))
    return [*read, str(ctx.uuid4())]


@app.workflow(name="values-sync", version="v1")
def values_sync(ctx: SyncWorkflowContext, marker: str) -> list[str]:
    """`values` as a sync workflow."""
    read = [ctx.now().isoformat(), repr(ctx.random()), str(ctx.uuid4())]
    ctx.step.run("use", use_values, marker, "|".join(read))
    return [*read, str(ctx.uuid4())]
