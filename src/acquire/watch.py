"""Watching a download (until done or stalled) and its seeding (until a goal is reached).

A watch is a child workflow, `acquire-watch`, that checks the client on a growing interval
(`ACQUIRE_POLL`, default 5s, doubling up to `ACQUIRE_POLL_MAX`, default 15m) for at most
`CHECKS` checks, then returns its state; the order's run starts the next child with it.
Each check costs its child two step attempts and each child one attempt of the order's
run, so no run nears its step-attempt limit however long a download takes (30 days at
15m is 2880 checks: 15 children). Waiting is durable between checks: no worker is held.

Everything a check decides from is in the state it is handed and returns (last progress
and since when, the seeding start), so a worker restart re-arms a stall or seeding timer
where it was, never from zero.
"""

from __future__ import annotations

import os
import time
from typing import Any, Literal

from pydantic import BaseModel

from durably import WorkflowContext, parse_duration

from .clients import client_for

CHECKS = int(os.environ.get("ACQUIRE_CHECKS_PER_WATCH", "200"))
Outcome = Literal["waiting", "done", "stalled", "goal"]


def poll_first() -> float:
    return parse_duration(os.environ.get("ACQUIRE_POLL", "5s")).total_seconds()


def poll_max() -> float:
    return parse_duration(os.environ.get("ACQUIRE_POLL_MAX", "15m")).total_seconds()


class Watch(BaseModel):
    """What a watch needs and what it has learnt so far (passed from child to child)."""

    id: str
    client: Literal["qbittorrent", "local"]
    hash: str
    source: str
    kind: Literal["download", "seed"] = "download"
    interval: float
    max_interval: float
    checks: int = 0
    stall: float | None = None  # seconds without progress that make a download stalled
    since: float | None = None  # when progress was last seen (epoch seconds)
    last_bytes: int = -1
    seed_ratio: float | None = None
    seed_time: float | None = None
    seed_started: float | None = None


def _decide(w: Watch, st: Any, now: float) -> Outcome:
    if w.kind == "seed":
        seeded = st.seeding_time if st.seeding_time is not None else now - (w.seed_started or now)
        reached_ratio = w.seed_ratio is not None and st.ratio >= w.seed_ratio
        reached_time = w.seed_time is not None and seeded >= w.seed_time
        return "goal" if reached_ratio or reached_time else "waiting"
    if st.done:
        return "done"
    if w.stall is not None and w.since is not None and now - w.since >= w.stall:
        return "stalled"
    return "waiting"


def check(w: Watch) -> dict[str, Any]:
    """One look at the client: the outcome, the status, and the watch's next state."""
    now = time.time()
    try:
        st = client_for(w.client).status(w.hash, w.source)
    except (ConnectionError, OSError) as exc:  # the client is away: no news, no verdict
        return {"outcome": "waiting", "status": {"state": f"unreachable: {exc}"},
                "watch": w.model_copy(update={"checks": w.checks + 1}).model_dump()}  # fmt: skip
    if not st.exists:
        from durably import NonRetryableError

        raise NonRetryableError(f"the download {w.hash} is gone from the client")
    update: dict[str, Any] = {"checks": w.checks + 1,
                              "interval": min(w.interval * 2, w.max_interval)}  # fmt: skip
    if st.done_bytes != w.last_bytes or w.since is None:
        update.update(since=now, last_bytes=st.done_bytes)
    if w.kind == "seed" and w.seed_started is None:
        update["seed_started"] = now
    nxt = w.model_copy(update=update)
    return {"outcome": _decide(nxt, st, now), "status": st.as_dict(), "watch": nxt.model_dump()}


async def watch_body(ctx: WorkflowContext, w: Watch) -> dict[str, Any]:
    """Check, then wait (for the finish hook's signal, or a durable sleep), up to CHECKS."""
    result: dict[str, Any] = {}
    for _ in range(CHECKS):
        name = "check-download" if w.kind == "download" else "check-seeding"
        result = await ctx.step.run(name, check, w)
        if result["outcome"] != "waiting":
            return result
        if w.kind == "download":
            await ctx.step.wait_for_signal(f"download-done:{w.id}", timeout=w.interval,
                                           name="download-signal")  # fmt: skip
        else:
            await ctx.step.sleep("seed-wait", w.interval)
        w = Watch.model_validate(result["watch"])
    return result
