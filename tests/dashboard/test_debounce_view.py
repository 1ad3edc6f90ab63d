"""A run a debounced start made (SPEC §4.23) shows its debounce key on its dashboard page;
a plain run's page has no such row."""

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


async def _started(db_url: str) -> tuple[str, str]:
    app = Durably(db_url)

    @app.workflow(name="digest", version="v1")
    async def digest(ctx: Any, n: int) -> int:
        return n

    async with app:
        debounced = await digest.start(1, debounce="1h", debounce_key="user-<1>")
        plain = await digest.start(2)
    return debounced.run_id, plain.run_id


def test_a_debounced_run_shows_its_key(db_url: str) -> None:
    debounced, plain = asyncio.run(_started(db_url))
    app = Durably(db_url)
    try:
        with serving(app, "t0ken") as base:
            page = _get(f"{base}/runs/{debounced}")
            assert "<th>debounce key</th><td><code>user-&lt;1&gt;</code></td>" in page
            assert "debounce key" not in _get(f"{base}/runs/{plain}")
    finally:
        app.sync.close()
