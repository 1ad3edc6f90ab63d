"""A worker's start line says what it serves, and where (issue 31 item 12): its
workflows, queues, schedules and database, the password masked."""

from __future__ import annotations

import asyncio
import logging

import pytest

from durably import Durably, WorkflowContext
from tests.helpers import eventually


async def test_the_start_line_names_what_the_worker_serves(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = db_url.replace("postgres@", "postgres:s3cret@", 1)  # trust auth: not checked
    app = Durably(url)
    downloads = app.queue("downloads", concurrency=3, per_key=1)

    @app.workflow(name="fetch", version="v2", queue=downloads)
    async def fetch(ctx: WorkflowContext, url: str) -> None:
        return None

    @app.workflow(name="nightly", schedule="0 3 * * *", tz="Europe/Paris")
    async def nightly(ctx: WorkflowContext) -> None:
        return None

    caplog.set_level(logging.INFO, logger="durably.worker")
    worker = app.worker(worker_id="W1")
    task = asyncio.create_task(worker.run(install_signals=False))
    try:
        await eventually(lambda: "worker W1 started" in caplog.text, what="the start line")
    finally:
        worker.stop()
        await task
        await app.close()
    line = next(r.getMessage() for r in caplog.records if "worker W1 started" in r.getMessage())
    for part in ("fetch@v2", "nightly@v1", "downloads", "0 3 * * *", "Europe/Paris"):
        assert part in line, line
    assert "s3cret" not in line
    if url.startswith("postgresql"):
        assert "postgres:***@" in line, line
    else:
        assert url.removeprefix("sqlite:///") in line, line
