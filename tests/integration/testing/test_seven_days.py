"""The README's example: a 7-day workflow tested with the `env` fixture (time skips)."""

from __future__ import annotations

import pytest

from durably import Durably, WorkflowContext
from durably.testing import Environment

app = Durably()


@app.workflow(name="retention", version="v1")
async def retention(ctx: WorkflowContext, order_id: str) -> str:
    await ctx.step.sleep("keep", "7 days")
    return await ctx.step.run("cleanup", lambda: f"cleaned {order_id}")


@pytest.fixture
def durably_app() -> Durably:
    return app


@pytest.fixture
def durably_database(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else db_url


async def test_retention(env: Environment) -> None:
    handle = await retention.start("o1")
    assert await handle.result(timeout="10s") == "cleaned o1"
