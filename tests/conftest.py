"""Shared fixtures: a PostgreSQL server (the machine's, or a throwaway cluster), a fresh
database per test, the `backend` parameter that runs a test on SQLite and PostgreSQL, the
processes a test starts, and a fault-injecting proxy in front of the server. Also stretches
pytest-timeout's limit like every deadline."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests import pgcluster
from tests.faults import FaultProxy
from tests.helpers import scaled
from tests.processes import Processes

PG_URL = os.environ.get("DURABLY_TEST_PG", "postgresql://postgres@127.0.0.1:5432")

pytest_plugins = ["durably.testing.pytest_plugin"]  # the `env` fixture users get


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The per-test limit of pytest-timeout (`timeout` in pyproject.toml) is a deadline
    too: stretch it by DURABLY_TEST_SLOWNESS, unless --timeout or PYTEST_TIMEOUT set one."""
    ini = config.getini("timeout")
    if config.getoption("timeout", None) is None and not os.environ.get("PYTEST_TIMEOUT") and ini:
        config.option.timeout = scaled(float(ini))


def _reachable(url: str) -> bool:
    try:
        with psycopg.connect(f"{url}/postgres", connect_timeout=round(scaled(3))):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A base URL of a PostgreSQL server the tests may create databases on."""
    if _reachable(PG_URL):
        yield PG_URL
        return
    if pgcluster.available():
        cluster = pgcluster.Cluster().init()
        cluster.start()
        try:
            yield cluster.url
        finally:
            cluster.destroy()
        return
    reason = (
        f"no PostgreSQL at {PG_URL} and no initdb/pg_ctl to start one; "
        "set DURABLY_TEST_PG or install PostgreSQL"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database of this test's own."""
    name = f"durably_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{pg_server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{pg_server}/{name}"
    finally:
        with psycopg.connect(f"{pg_server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fault_proxy(pg_server: str) -> Iterator[FaultProxy]:
    """A started `FaultProxy` in front of the server: connect to `fault_proxy.url_for(pg_url)`."""
    server = urlsplit(pg_server)
    with FaultProxy(server.hostname or "127.0.0.1", server.port or 5432) as proxy:
        yield proxy


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/durably.db"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test runs once on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/durably.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def processes() -> Iterator[Processes]:
    """The processes this test starts: stopped and waited for when it ends, pass or fail."""
    owned = Processes()
    try:
        yield owned
    finally:
        owned.stop_all()
