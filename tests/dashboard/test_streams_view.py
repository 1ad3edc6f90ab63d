"""A run's streams on the dashboard (SPEC §4.21): each key with its length, whether it is
closed, and its latest values, on the run's page."""

from __future__ import annotations

import asyncio
import html
import urllib.request
from typing import Any

import pytest

from durably import Durably, InvalidInput
from tests.dashboard.conftest import serving
from tests.helpers import eventually, scaled

SHOWN = 10  # the latest values a stream shows


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(10)) as resp:
        return str(resp.read().decode())


async def _writing(db_url: str) -> str:
    """A run that wrote 12 tokens and closed them, wrote one progress value, and waits."""
    app = Durably(db_url)

    @app.workflow(name="writer", version="v1")
    async def writer(ctx: Any) -> None:
        for i in range(12):
            await ctx.step.write_stream("tokens", f"tok-{i}")
        await ctx.step.close_stream("tokens")
        await ctx.step.write_stream("progress", {"done": "<half>"})
        await ctx.step.wait_for_signal("never")

    async with app, app.worker():
        handle = await writer.start()

        async def waiting() -> bool:
            return (await handle.status()) == "waiting"

        await eventually(waiting, what="the writer waiting")
    return handle.run_id


def test_a_runs_streams_are_shown_with_their_latest_values(db_url: str) -> None:
    run_id = asyncio.run(_writing(db_url))
    app = Durably(db_url)
    try:
        assert app.sync.list_streams(run_id, last=2) == [
            {"key": "progress", "length": 1, "closed": False,
             "last": [{"offset": 0, "value": {"done": "<half>"}}]},
            {"key": "tokens", "length": 12, "closed": True,
             "last": [{"offset": 10, "value": "tok-10"}, {"offset": 11, "value": "tok-11"}]},
        ]  # fmt: skip
        with pytest.raises(InvalidInput, match="last"):
            app.sync.list_streams(run_id, last=-1)
        with serving(app, "t0ken") as base:
            raw = _get(f"{base}/runs/{run_id}")
        assert "<half>" not in raw  # a value is text on the page, never markup
        page = html.unescape(raw)
        part = page[page.index("<h2>streams</h2>") :]
        assert "tokens" in part and "12 values, closed" in part
        assert "progress" in part and "1 value, open" in part
        shown = [f'"tok-{i}"' for i in range(12 - SHOWN, 12)]
        assert all(tok in part for tok in shown), part
        assert '"tok-1"' not in part  # only the latest are shown
        assert '{"done": "<half>"}' in part
    finally:
        app.sync.close()
