"""A held run on the dashboard (its status in the filter, its badge, its error, the cancel
that ends it) and in /metrics, on both backends."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

from durably import Durably
from tests.dashboard.conftest import serving
from tests.helpers import eventually, scaled


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(10)) as resp:
        return str(resp.read().decode())


def _deploy(app: Durably, first: str) -> Any:
    async def reserve() -> str:
        return "stock"

    @app.workflow(name="deploy", version="v1")
    async def deploy(ctx: Any) -> None:
        await ctx.step.run(first, reserve)
        await ctx.step.wait_for_signal("approve")

    return deploy


async def _held_run(db_url: str) -> str:
    """A run recorded by the original code, then held by code that renamed its step."""
    app = Durably(db_url)
    deploy = _deploy(app, "reserve")
    async with app, app.worker():
        run_id: str = (await deploy.start()).run_id
        await eventually(lambda: _status(app, run_id, "waiting"), what="the wait")
    bad = Durably(db_url)
    _deploy(bad, "reserve-renamed")
    async with bad, bad.worker():
        await bad.send_signal("approve")  # wakes the run: the changed code replays it
        await eventually(lambda: _status(bad, run_id, "held"), what="the run held")
    return run_id


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


def test_a_held_run_is_listed_shown_and_counted(db_url: str) -> None:
    run_id = asyncio.run(_held_run(db_url))
    app = Durably(db_url)
    try:
        with serving(app, "t0ken") as base:
            listed = _get(base + "/?status=held")
            assert "<option selected>held</option>" in listed
            assert run_id in listed and 'class="s-held"' in listed
            assert run_id not in _get(base + "/?status=failed")
            page = _get(f"{base}/runs/{run_id}")
            assert "NonDeterminismError" in page and "held, not failed" in page
            assert "id='cancel'" in page  # a held run has not ended: it can be canceled
            assert 'durably_runs{status="held"} 1.0' in _get(base + "/metrics")
    finally:
        app.sync.close()
