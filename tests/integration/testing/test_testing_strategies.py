"""Per-key strategies (SPEC §4.23) in durably.testing, with time skipping: a start made
for later holds its key while it waits to come due."""

from __future__ import annotations

from typing import Any

import pytest

from durably import Durably, WorkflowContext
from durably.testing import Environment


@pytest.fixture
def env_db(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else db_url


def _app(on_full: str) -> tuple[Durably, Any]:
    app = Durably()
    q = app.queue("q", per_key=1, on_full=on_full)

    @app.workflow(name="job", version="v1", queue=q)
    async def job(ctx: WorkflowContext, k: int) -> int:
        return await ctx.step.run("double", lambda: 2 * k)

    return app, job


async def test_cancel_new_and_cancel_running_with_skipped_time(env_db: str) -> None:
    app, job = _app("cancel_new")
    async with Environment(app, database=env_db) as env:
        first = await job.start(1, concurrency_key="k", available_at="+1h")
        second = await job.start(2, concurrency_key="k")
        assert (await second.get()).status == "canceled"
        await env.skip_time()
        assert await first.result(timeout="10s") == 2
    app, job = _app("cancel_running")
    async with Environment(app, database=env_db) as env:
        first = await job.start(1, concurrency_key="k", available_at="+1h")
        second = await job.start(2, concurrency_key="k", available_at="+1h")
        assert (await first.get()).status == "canceled"
        await env.skip_time()
        assert await second.result(timeout="10s") == 4
