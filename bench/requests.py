"""`python -m bench request`: the round trip of `app.request` to a run waiting for it on an
idle worker (SPEC §4.22), beside the `signal` scenario (a signal sent to a waiting run,
until the run has completed): the same worker, warm-up and gaps."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from durably import Durably

from .scenarios import WARM_UP, make_app, reset, stats


def _app(url: str) -> Durably:
    app = make_app(url)

    @app.workflow(name="reqbench", version="v1")
    async def reqbench(ctx: Any) -> None:
        req = await ctx.step.wait_for_request("ask", timeout="10m")
        await ctx.step.reply(req, req.data)

    return app


async def _waiting(app: Durably) -> str:
    handle = await app.start("reqbench")
    while (await handle.status()) != "waiting":
        await asyncio.sleep(0.005)
    return handle.run_id


async def request_latency(url: str, n: int, gap_ms: int) -> dict[str, Any]:
    await reset(url)
    app = _app(url)
    client: list[float] = []
    async with app, app.worker(concurrency=10):
        for k in range(WARM_UP):
            assert await app.request(await _waiting(app), "ask", k, timeout="30s") == k
        for i in range(n):
            run_id = await _waiting(app)
            await asyncio.sleep(gap_ms / 1000 + random.random())
            t0 = time.perf_counter()
            assert await app.request(run_id, "ask", i, timeout="30s") == i
            client.append((time.perf_counter() - t0) * 1000)
    return {"system": "durably", "mode": "request", "n": n, "gap_ms": gap_ms,
            "client_ms": stats(client)}  # fmt: skip
