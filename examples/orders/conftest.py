import asyncio

import pytest

import orders
import shop
from durably import Durably
from durably.testing import Environment

pytest_plugins = ["durably.testing.pytest_plugin"]


@pytest.fixture
def durably_app() -> Durably:
    return orders.app


@pytest.fixture
async def env(env: Environment) -> Environment:
    """The plugin's environment, with the shop's tables in its database."""
    await asyncio.to_thread(shop.create_tables, env.app.url)  # not on the worker's loop
    orders.notices.clear()
    return env
