"""Each queue's running and waiting runs on the dashboard's list page and in /metrics."""

from __future__ import annotations

import urllib.request
from typing import Any

from durably import Durably
from durably.store.queues import QueueClaims
from tests.dashboard.conftest import serving
from tests.helpers import scaled


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(10)) as resp:
        return str(resp.read().decode())


def test_queue_counts_on_the_list_page_and_in_metrics(db_url: str) -> None:
    app = Durably(db_url)
    q = app.queue("downloads", concurrency=1, rate="10/1m")
    latest = app.queue("search", per_key=1, on_full="cancel_running")

    @app.workflow(name="fetch", queue=q)
    async def fetch(ctx: Any, n: int) -> int:
        return n

    client = app.sync
    client.start("fetch", 1)
    client.start("fetch", 2)

    async def claim_one() -> None:
        claims = QueueClaims(app.store)
        await claims.declare([q, latest])
        assert len(await claims.claim("downloads", "w", [("fetch", "v1")], 5, 60.0)) == 1

    client.run(claim_one())
    try:
        with serving(app, "t0ken") as base:
            page = _get(base + "/")
            assert "<table id='queues'>" in page
            assert "<td>1</td><td>1</td><td>1</td><td>-</td><td>10/60s</td><td>-</td>" in page
            # The per-key strategy shows with the queue (SPEC §4.23).
            shown = "<td>0</td><td>0</td><td>-</td><td>1</td><td>-</td><td>cancel_running</td>"
            assert shown in page
            assert _get(base + "/?queue=downloads").count("fetch@v1") == 2
            assert _get(base + "/?queue=other").count("fetch@v1") == 0
            metrics = _get(base + "/metrics")
            assert 'durably_queue_running{queue="downloads"} 1.0' in metrics
            assert 'durably_queue_waiting{queue="downloads"} 1.0' in metrics
    finally:
        client.close()
