"""An app for operating runs with real worker processes (§4.18): resume, fork, patching.

Configured by environment: DURABLY_DATABASE_URL; PATCHED=1 runs the code after a deploy
that added two patches; FIXED=1 makes `charge` succeed; RAN_LOG, a file each step body
appends "run_id step" to (what ran, across processes).
"""

from __future__ import annotations

import os
from typing import Any

from durably import Durably, RetryPolicy, StepContext, StepFailedError

app = Durably(os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db"))
PATCHED = os.environ.get("PATCHED") == "1"
FIXED = os.environ.get("FIXED") == "1"
TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")


def body(ctx: StepContext, value: Any) -> Any:
    with open(os.environ["RAN_LOG"], "a") as out:
        out.write(f"{ctx.run_id} {ctx.step}\n")
    if ctx.step == "charge" and not FIXED:
        raise RuntimeError("card declined")
    return value


@app.workflow(name="order", version="v1")
async def order(ctx: Any, n: int) -> list[Any]:
    out = [await ctx.step.run("reserve", body, n)]
    if PATCHED and await ctx.patched("pre-check"):
        out.append(await ctx.step.run("pre-check", body, "checked"))
    out.append(await ctx.step.wait_for_signal(f"go:{n}", timeout="60s"))
    if PATCHED and await ctx.patched("audit"):
        out.append(await ctx.step.run("audit", body, "audited"))
    out.append(await ctx.step.run("charge", body, "charged", retry=TWICE))
    return out


@app.workflow(name="order", version="v2")
async def order_v2(ctx: Any, n: int) -> list[Any]:
    out = [await ctx.step.run("reserve", body, n)]
    out.append(await ctx.step.wait_for_signal(f"go:{n}", timeout="60s"))
    out.append(await ctx.step.run("charge-v2", body, "charged-v2"))
    return out


def flaky(ctx: StepContext, value: Any) -> Any:
    """Logs like `body`; fails until FIXED."""
    with open(os.environ["RAN_LOG"], "a") as out:
        out.write(f"{ctx.run_id} {ctx.step}\n")
    if not FIXED:
        raise RuntimeError(f"{ctx.step} is down")
    return value


@app.workflow(name="shipment", version="v1")
async def shipment(ctx: Any, n: int) -> list[Any]:
    """A caught failure, a step completed after it, then one that fails until FIXED."""
    try:
        held = await ctx.step.run("hold", flaky, "held", retry=RetryPolicy(max_attempts=1))
    except StepFailedError:
        held = "no hold"
    charged = await ctx.step.run("charge-card", body, f"charged {n}")
    shipped = await ctx.step.run("ship", flaky, "shipped", retry=TWICE)
    return [held, charged, shipped]


def same(value: int) -> int:
    return value


@app.workflow(name="report", version="v1")
async def report(ctx: Any, parts: int) -> int:
    for part in range(1, parts + 1):
        await ctx.step.run(f"part-{part}", same, part)
        await ctx.step.set_event("progress", {"done": part, "of": parts})
    return parts


@app.workflow(name="child", version="v1")
async def child(ctx: Any, n: int) -> int:
    return int(await ctx.step.run("double", same, n * 2))


def explode() -> None:
    if not FIXED:
        raise ValueError("boom: the approval came but the charge could not be made, " * 3)


@app.workflow(name="parent", version="v1")
async def parent(ctx: Any, name: str) -> int:
    got = await ctx.step.run_workflow(child, 21)
    await ctx.step.set_event("stage", {"child": got})
    await ctx.step.wait_for_signal(f"approve:{name}")
    await ctx.step.run("explode", explode, retry=RetryPolicy(max_attempts=1))
    return int(got)


@app.workflow(name="billing", version="v1")
async def billing(ctx: Any, n: int) -> list[Any]:
    """A child that charges, then ships (failing until FIXED): its charge must run once,
    whatever its parent's attempts do."""
    charged = await ctx.step.run("charge-child", body, f"charged {n}")
    shipped = await ctx.step.run("ship-child", flaky, "shipped", retry=TWICE)
    return [charged, shipped]


@app.workflow(name="checkout", version="v1", retry=RetryPolicy(max_attempts=1))
async def checkout(ctx: Any, n: int) -> list[Any]:
    """Fails when its child does; `durably resume` continues it."""
    return list(await ctx.step.run_workflow(billing, n))


def fail_once(ctx: StepContext) -> None:
    """Fails the first time it runs in this test (a file marks that it did)."""
    marker = os.environ["RAN_LOG"] + f".{ctx.step}"
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("the first attempt fails")


@app.workflow(name="waits-for-finish", version="v1")
async def waits_for_finish(ctx: Any, n: int) -> str:
    await ctx.step.run("charge-child", body, f"charged {n}")
    await ctx.step.wait_for_signal(f"finish:{n}", timeout="60s")
    return f"finished {n}"


@app.workflow(
    name="retried", version="v1", retry=RetryPolicy(max_attempts=2, initial_interval="10ms")
)
async def retried(ctx: Any, n: int) -> str:
    """Its first attempt fails while its child still runs; the second waits for the child."""
    child = ctx.step.start_workflow(waits_for_finish, n)
    await ctx.step.run("fail-once", fail_once, retry=RetryPolicy(max_attempts=1))
    return str(await child)


@app.workflow(
    name="approval", version="v1", retry=RetryPolicy(max_attempts=2, initial_interval="10ms")
)
async def approval(ctx: Any, n: int) -> list[Any]:
    """A caught failure, then a signal wait, then a failure: the retry's cut drops the
    wait, and its signal goes back for the retry's wait (never sent again)."""
    try:
        await ctx.step.run("hold", fail_once, retry=RetryPolicy(max_attempts=1))
        held = "held"
    except StepFailedError:
        held = "no hold"
    got = await ctx.step.wait_for_signal(f"approve:{n}", timeout="60s")
    await ctx.step.run("charge-approved", fail_once, retry=RetryPolicy(max_attempts=1))
    return [held, got]
