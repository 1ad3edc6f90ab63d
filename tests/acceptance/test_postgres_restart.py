"""Seed case (i), PostgreSQL restart: a real restart of a cluster of the test's own, while
a run sleeps; the worker backs off, reconnects and the run completes."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from durably import DatabaseUnavailable, Durably
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
    url = _database(cluster)
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


def _database(cluster: pgcluster.Cluster, *settings: str) -> str:
    """The URL of a new database "app" on the cluster, with `settings` (`ALTER SYSTEM`)."""
    with psycopg.connect(f"{cluster.url}/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE app")
        for setting in settings:
            conn.execute(f"ALTER SYSTEM SET {setting}")
        conn.execute("SELECT pg_reload_conf()")
    return f"{cluster.url}/app"


async def _noop(ctx: Any) -> None:
    return None


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_claim_lost_in_a_crash_never_hands_out_its_fence(
    cluster: pgcluster.Cluster, tmp_path: Path, processes: Processes
) -> None:
    """A claim commits without waiting for its WAL flush, so a crash can lose it and the
    run's next claim takes the same fence number. A body that got the number must never
    share it with another execution: the fences a run's executions hand out only grow.

    The body hands its fence out and freezes its worker on the spot (SIGSTOP), before the
    worker writes anything more; PostgreSQL is then killed (immediate shutdown, with the
    WAL writer held back so that nothing else flushes the claim) and started again."""
    url = _database(cluster, "wal_writer_delay = '10s'")
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    seed.setup_business_tables(ledger_url)
    procs = Procs(url, tmp_path, processes)
    procs.cli("migrate")
    app = seed.app.rebind(url)
    try:
        worker = procs.worker("A", "--poll", "0.2s", "--lease", duration(3),
                              LEDGER_URL=ledger_url)  # fmt: skip
        run_id = app.sync.start("fence-out").run_id
        app.sync.close()
        eventually_sync(lambda: _stopped(worker.pid), timeout=30,
                        what="the body to hand out its fence and freeze its worker")  # fmt: skip
        cluster.stop("immediate")
        cluster.start()
        os.kill(worker.pid, signal.SIGCONT)
        run = app.sync.wait(run_id, timeout=scaled(60))
        assert run.status == "completed" and run.output == "done"
        fences = [f for rid, step, _, event, f in seed.read_ledger(ledger_url)
                  if rid == run_id and event == "start"]  # fmt: skip
        assert fences and fences == sorted(set(fences)), f"fences handed out: {fences}"
    finally:
        app.sync.close()


async def test_after_a_restart_one_statement_fails_not_one_per_pooled_connection(
    cluster: pgcluster.Cluster,
) -> None:
    """A server restart breaks every pooled connection. Each broken one used to fail one
    statement of the engine's as it came out of the pool; a run whose record write fails
    is left to be claimed again a lease later, so a restart cost several runs a lease."""
    app = Durably(_database(cluster))
    app.workflow(name="noop")(_noop)
    async with app:
        run_ids = [(await app.start("noop")).run_id for _ in range(8)]
        await asyncio.gather(*(app.get_run(r) for r in run_ids))  # several pooled connections
        cluster.stop("fast")
        cluster.start()
        failures = 0
        for run_id in run_ids:
            try:
                await app.get_run(run_id)
            except DatabaseUnavailable:
                failures += 1
        assert failures <= 1


async def test_a_lost_connection_fails_its_statement_at_once_beside_a_silent_one(
    cluster: pgcluster.Cluster,
) -> None:
    """The pools replace their idle connections when one is lost, without testing them: a
    test waits on a connection that is silent (a frozen backend, a blackholed path), and the
    failed statement's error waited with it, up to the TCP retransmission limit."""
    app = Durably(_database(cluster))
    app.workflow(name="noop")(_noop)
    frozen: list[int] = []
    async with app:
        run_ids = [(await app.start("noop")).run_id for _ in range(4)]
        idle: list[Any] = []
        while len(idle) < 2:  # several pooled connections, idle
            await asyncio.gather(*(app.get_run(r) for r in run_ids))
            idle = list(app.connector._pools.engine._pool)  # type: ignore[attr-defined]
        first, rest = idle[0], idle[1:]
        try:
            for conn in rest:
                os.kill(conn.info.backend_pid, signal.SIGSTOP)
                frozen.append(conn.info.backend_pid)
            with psycopg.connect(f"{cluster.url}/postgres", autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (first.info.backend_pid,))
            # The next statement takes the terminated connection (the pool hands out its
            # oldest idle one first).
            with pytest.raises(DatabaseUnavailable):
                async with asyncio.timeout(scaled(10)):
                    await app.get_run(run_ids[0])
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)


async def test_a_lease_renewal_after_an_outage_connects_at_once(
    cluster: pgcluster.Cluster,
) -> None:
    """Renewals had a pool of one connection, whose reconnection backs off (1, 2, 4, 8 s)
    and never grows past its one attempt: after an outage of a few seconds, a renewal
    waited for that schedule, not for the server, and the leases of runs executing fine ran
    out (the chaos soak saw a step run again). The first renewal after the server is back
    must connect at once."""
    app = Durably(_database(cluster))
    app.workflow(name="noop")(_noop)
    renew = {"worker_id": "w", "ids": [], "fences": [], "lease": 3.0}
    async with app:
        await app.migrate()
        assert await app.store.db.fetch("heartbeat", **renew) == []
        cluster.stop("fast")
        with pytest.raises(DatabaseUnavailable):
            await app.store.db.fetch("heartbeat", **renew)
        # The outage lasts past the pool's attempts at 0, 1 and 3 s (each +-10%), not to
        # its next, at 7 s.
        await asyncio.sleep(3.8)
        cluster.start()
        renewed = app.store.db.fetch("heartbeat", **renew)
        # Not stretched by DURABLY_TEST_SLOWNESS: what it tells apart is the pool's own
        # schedule (2 s or more to wait), not this machine's speed (milliseconds).
        assert await asyncio.wait_for(renewed, 1.5) == []
