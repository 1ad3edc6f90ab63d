"""A pytest plugin: an `env` fixture, a `durably.testing.Environment` around your app.

Enable it in `conftest.py` with `pytest_plugins = ["durably.testing.pytest_plugin"]`
(it needs pytest-asyncio), and give it your app with a `durably_app` fixture:

```python
@pytest.fixture
def durably_app() -> Durably:
    return app

async def test_retention(env: Environment) -> None:
    handle = await retention.start("o1")   # sleeps 7 days
    assert await handle.result() == "done"  # time skips while the result is awaited
```

The database is SQLite unless a `durably_database` fixture (or the environment variable
`DURABLY_TEST_DATABASE`) names a PostgreSQL URL: there each test works in schemas of its
own, dropped after it, so tests may share one database.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from ..client.durably import Durably
from ._environment import Environment

try:
    import pytest_asyncio
except ImportError as exc:  # pragma: no cover
    raise ImportError(
        "durably.testing.pytest_plugin needs pytest-asyncio: pip install pytest-asyncio"
    ) from exc


@pytest.fixture
def durably_app() -> Durably:
    """Override this fixture to return the application under test."""
    raise pytest.UsageError("define a `durably_app` fixture that returns your Durably app")


@pytest.fixture
def durably_database() -> str:
    """ "sqlite", or a PostgreSQL URL from `DURABLY_TEST_DATABASE`; override to choose."""
    return os.environ.get("DURABLY_TEST_DATABASE", "sqlite")


@pytest_asyncio.fixture
async def env(durably_app: Durably, durably_database: str) -> AsyncIterator[Environment]:
    """A running `Environment` around `durably_app`, skipping time automatically."""
    async with Environment(durably_app, database=durably_database, auto_skip=True) as e:
        yield e
