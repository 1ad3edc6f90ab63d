"""A workflow that answers one request, with a step between taking it and replying that a
test can hold, to kill its worker there. Configured by environment: DURABLY_DATABASE_URL;
ENTERED_FILE, a file the step appends its pid to; HOLD_FILE, while it exists the step
waits (its worker is killed meanwhile)."""

from __future__ import annotations

import os
import time
from typing import Any

from durably import Durably, StepContext, WorkflowContext

URL = os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db")
app = Durably(URL)


def hold(ctx: StepContext) -> str:
    entered, held = os.environ.get("ENTERED_FILE"), os.environ.get("HOLD_FILE")
    if entered:
        with open(entered, "a") as out:
            out.write(f"{os.getpid()}\n")
    while held and os.path.exists(held):
        time.sleep(0.05)
    return "held"


@app.workflow(name="answer-once", version="v1")
async def answer_once(ctx: WorkflowContext) -> str:
    req = await ctx.step.wait_for_request("ask")
    assert req is not None
    await ctx.step.run("hold", hold)
    if req.data == "no":
        await ctx.step.reject(req, "not today")
    else:
        await ctx.step.reply(req, {"doubled": req.data * 2})
    await ctx.step.wait_for_signal(f"end:{ctx.run_id}")
    return "done"


def answers(value: Any) -> Any:
    return {"doubled": value * 2}
