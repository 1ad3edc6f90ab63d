"""durably.testing and debounce (SPEC §4.23): with time skipping, a debounced run fires
once its window has passed, with the latest input, pushed back by each start up to its
`debounce_max`; both backends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durably import Durably, WorkflowContext
from durably.testing import Environment


@pytest.fixture
def env_db(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else db_url


async def test_a_debounced_run_fires_once_its_window_has_passed(env_db: str) -> None:
    app = Durably()

    @app.workflow(name="digest", version="v1")
    async def digest(ctx: WorkflowContext, n: int) -> int:
        return n

    async with Environment(app, database=env_db) as env:
        # Hours, so that the real time a slow machine takes between the calls is nothing.
        options: dict[str, Any] = dict(debounce="1h", debounce_key="u", debounce_max="150m")
        opened = env.now()
        first = await digest.start(1, **options)
        await env.skip_time("50m")
        second = await digest.start(2, **options)
        await env.skip_time("50m")  # 100 min in: due at 110, pushed to 160, capped at 150
        third = await digest.start(3, **options)
        assert second.joined and third.joined and {second.run_id, third.run_id} == {first.run_id}
        assert (await first.get()).status == "pending"
        await env.skip_time()  # to the window's end
        assert await first.result(timeout="10s") == 3
        run = await first.get()
        assert run.started_at is not None
        assert timedelta(minutes=150) <= run.started_at - opened < timedelta(minutes=151)
        # Claimed: the next start opens a new window, which fires `debounce` after it.
        later = await digest.start(4, **options)
        assert later.run_id != first.run_id and not later.joined
        assert timedelta(minutes=59) < await env.skip_time() <= timedelta(hours=1, seconds=1)
        assert await later.result(timeout="10s") == 4
        assert len(await app.list_runs(workflow="digest")) == 2
