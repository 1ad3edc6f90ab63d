"""Seed case (i), PostgreSQL restart: a real restart of a cluster of the test's own, while
a run sleeps; the worker backs off, reconnects and the run completes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests import pgcluster
from tests.acceptance.conftest import Procs
from tests.apps import seed
from tests.helpers import duration, eventually_sync, scaled
from tests.processes import Processes


@pytest.fixture
def cluster() -> Iterator[pgcluster.Cluster]:
    if not pgcluster.available():
        if os.environ.get("CI"):
            pytest.fail("initdb/pg_ctl are needed for the PostgreSQL restart test")
        pytest.skip("initdb/pg_ctl not installed: cannot run a throwaway PostgreSQL")
    c = pgcluster.Cluster().init()
    c.start()
    try:
        yield c
    finally:
        c.destroy()


def test_worker_survives_a_postgres_restart(
    cluster: pgcluster.Cluster, tmp_path: Path, processes: Processes
) -> None:
    with psycopg.connect(f"{cluster.url}/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE app")
    url = f"{cluster.url}/app"
    seed.setup_business_tables(url)
    procs = Procs(url, tmp_path, processes)
    procs.cli("migrate")
    app = seed.app.rebind(url)
    try:
        procs.worker("A", "--poll", "0.5s", "--lease", duration(3), "--heartbeat", duration(1))
        run_id = app.sync.start("sleeper", 3.0).run_id
        eventually_sync(lambda: app.sync.get_run(run_id).status == "waiting", timeout=20,
                        what="the run to sleep")  # fmt: skip
        app.sync.close()
        cluster.stop("fast")
        cluster.start()
        run = app.sync.wait(run_id, timeout=scaled(60))
        assert run.status == "completed" and run.output == "woke"
        events = [(step, w) for rid, step, w, *_ in seed.read_ledger(url) if rid == run_id]
        assert events == [("before", "A"), ("after", "A")]
        assert "unavailable" in procs.log("A")  # it did see the outage
    finally:
        app.sync.close()
