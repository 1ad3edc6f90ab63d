"""A chain of continue-as-new runs on the dashboard: `continued` in the status filter, each
run page linking the run it continues and the one it continued as, and /metrics."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

from durably import Durably
from tests.dashboard.conftest import serving
from tests.helpers import scaled


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(10)) as resp:
        return str(resp.read().decode())


async def _chain(db_url: str) -> list[str]:
    app = Durably(db_url)

    @app.workflow(name="twice", version="v1")
    async def twice(ctx: Any, gen: int) -> int:
        if gen < 2:
            ctx.continue_as_new(gen + 1)
        return gen

    async with app, app.worker():
        handle = await twice.start(0)
        assert await handle.result(timeout=scaled(30)) == 2
        ids = [handle.run_id]
        while (next_id := (await app.get_run(ids[-1])).continued_as) is not None:
            ids.append(next_id)
    return ids


def test_a_chain_is_listed_linked_and_counted(db_url: str) -> None:
    first, middle, last = asyncio.run(_chain(db_url))
    app = Durably(db_url)
    try:
        with serving(app, "t0ken") as base:
            listed = _get(base + "/?status=continued")
            assert "<option selected>continued</option>" in listed
            assert first in listed and middle in listed and last not in listed
            page = _get(f"{base}/runs/{middle}")
            assert f"<a href='/runs/{first}'>" in page and f"<a href='/runs/{last}'>" in page
            assert "continued from" in page and "continued as" in page
            assert "id='cancel'" not in page  # ended (its chain did too)
            assert 'durably_runs{status="continued"} 2.0' in _get(base + "/metrics")
    finally:
        app.sync.close()
