"""The dashboard over plain HTTP (no browser): finding runs, the header, /metrics."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from durably import Durably
from durably.dashboard import Dashboard
from tests.helpers import scaled
from tests.pgcluster import free_port


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(10)) as resp:
        return str(resp.read().decode())


@pytest.fixture
def served(db_url: str) -> Iterator[tuple[str, Durably]]:
    app = Durably(db_url)

    @app.workflow(name="order")
    async def order(ctx: Any, n: int) -> int:
        return n

    httpd = Dashboard(app, token="t0ken").serve_in_background("127.0.0.1", port := free_port())
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        httpd.shutdown()
        httpd.server_close()
        app.sync.close()


def test_the_run_list_finds_a_run_by_its_idempotency_key(served: tuple[str, Durably]) -> None:
    base, app = served
    wanted = app.sync.start("order", 1, idempotency_key="order-42", available_at="+1h")
    other = app.sync.start("order", 2, idempotency_key="order-43", available_at="+1h")
    page = _get(base + "/?key=order-42")
    assert wanted.run_id in page and other.run_id not in page
    assert "name='key' value='order-42'" in page  # the search stays in its field
    assert wanted.run_id in _get(base + "/?key=order-42&workflow=order")
    assert wanted.run_id not in _get(base + "/?key=order-42&status=failed")
