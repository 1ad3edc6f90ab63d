"""Typing cases checked by mypy (never run): signals. `wait_for_signal(type=T)` is typed
`T`, `T | None` when a timeout can end the wait, `T | D` with a `default`; without `type=`
the data is `Any`. `handle.signal()` sends to one run. Time and randomness read in workflow
code (`ctx.now()`, ...) are typed as what they replay.

A `# type: ignore[code]` line is a call mypy must reject with that code.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, assert_type

from pydantic import BaseModel

from durably import Durably, RunHandle, SyncWorkflowContext, WorkflowContext

app = Durably("sqlite:///:memory:")


class Approval(BaseModel):
    approved: bool


@dataclass
class Point:
    x: int


@app.workflow(name="signals", version="v1")
async def signals(ctx: WorkflowContext) -> None:
    assert_type(await ctx.step.wait_for_signal("a", type=Approval), Approval)
    assert_type(await ctx.step.wait_for_signal("a", type=Approval, timeout="1h"), Approval | None)
    expired = await ctx.step.wait_for_signal("a", type=Approval, timeout="1h", default="expired")
    assert_type(expired, Approval | str)
    assert_type(await ctx.step.wait_for_signal("p", type=Point), Point)
    assert_type(await ctx.step.wait_for_signal("n", type=int, timeout="1s"), int | None)
    assert_type(await ctx.step.wait_for_signal("x"), Any)
    assert_type(await ctx.step.wait_for_signal("x", timeout="1s", default=False), Any)
    assert_type(await ctx.step.wait_for_signal("u", type=int | str), Any)  # no class: Any
    ctx.step.wait_for_signal("a", type=Approval, timeot="1h")  # type: ignore[call-overload]
    assert_type(ctx.now(), datetime)
    assert_type(ctx.random(), float)
    assert_type(ctx.uuid4(), uuid.UUID)


@app.workflow(name="signals-sync", version="v1")
def signals_sync(ctx: SyncWorkflowContext) -> None:
    assert_type(ctx.step.wait_for_signal("a", type=Approval), Approval)
    assert_type(ctx.step.wait_for_signal("a", type=Approval, timeout="1h"), Approval | None)
    late: Literal["late"] = "late"
    assert_type(ctx.step.wait_for_signal("a", type=Approval, timeout="1h", default=late),
                Approval | Literal["late"])  # fmt: skip
    assert_type(ctx.step.wait_for_signal("x"), Any)
    assert_type(ctx.now(), datetime)
    assert_type(ctx.random(), float)
    assert_type(ctx.uuid4(), uuid.UUID)


async def client(handle: RunHandle[None]) -> None:
    assert_type(await handle.signal("go", {"ok": True}, idempotency_key="k"), dict[str, Any])
    await handle.signal("go", 1, "k")  # type: ignore[call-arg]
