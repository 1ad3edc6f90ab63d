"""A read replica for the inspection reads (`Durably(url, read_url=...)`): a throwaway
primary and a standby made from it by `pg_basebackup -R`, both started by the test. The
reads go to the standby (its `pg_stat_activity` shows them, and a paused replay shows its
older state); a run this client just started or changed is read from the primary, however
far the standby lags (its replay paused); a stopped standby leaves the reads to the
primary, logged once; SQLite refuses a read_url."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durably import ConfigurationError, Durably
from durably.client import reads
from durably.core.clock import Clock
from tests import pgcluster
from tests.helpers import eventually_sync, scaled


class Skipping(Clock):
    """The real clock, its monotonic time moved on by `ahead` seconds."""

    ahead = 0.0

    def monotonic(self) -> float:
        return super().monotonic() + self.ahead

    def past_the_window(self) -> None:
        self.ahead += max(reads.WRITE_WINDOW_S, reads.DOWN_S) + 1


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[pgcluster.Cluster, pgcluster.Cluster]]:
    if not pgcluster.available() or pgcluster.find_binary("pg_basebackup") is None:
        if os.environ.get("CI"):
            pytest.fail("initdb/pg_ctl/pg_basebackup are needed for the read replica tests")
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl, pg_basebackup) not installed: "
                    "cannot run a throwaway primary and standby")  # fmt: skip
    primary = pgcluster.Cluster().init()
    primary.start()
    standby: pgcluster.Cluster | None = None
    try:
        Durably(primary.url).sync.migrate()  # the standby starts with the schema
        standby = primary.standby()
        standby.start()
        yield primary, standby
    finally:
        if standby is not None:
            standby.destroy()
        primary.destroy()


def _sql(cluster: pgcluster.Cluster, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def _replayed(primary: pgcluster.Cluster, standby: pgcluster.Cluster) -> bool:
    (lsn,) = _sql(primary, "SELECT pg_current_wal_lsn()::text")[0]
    (behind,) = _sql(standby, f"SELECT pg_last_wal_replay_lsn() < '{lsn}'::pg_lsn")[0]
    return not behind


@pytest.fixture
def apps(
    pair: tuple[pgcluster.Cluster, pgcluster.Cluster],
) -> Iterator[tuple[Durably, Durably, Skipping]]:
    """(a client of the primary alone, a client with the standby for its reads, its clock)"""
    primary, standby = pair
    clock = Skipping()
    writer, reader = Durably(primary.url), Durably(primary.url, read_url=standby.url, clock=clock)
    try:
        yield writer, reader, clock
    finally:
        _sql(standby, "SELECT pg_wal_replay_resume()")
        writer.sync.close()
        reader.sync.close()


def test_reads_go_to_the_replica(
    pair: tuple[pgcluster.Cluster, pgcluster.Cluster], apps: tuple[Durably, Durably, Skipping]
) -> None:
    primary, standby = pair
    writer, reader, _ = apps
    run_id = writer.sync.start("nobody-runs-this", {"n": 1}).run_id
    eventually_sync(lambda: _replayed(primary, standby), what="the standby to replay")
    _sql(standby, "SELECT pg_wal_replay_pause()")
    writer.sync.cancel(run_id)  # on the primary; the standby does not replay it
    assert reader.sync.get_run(run_id).status == "pending"  # the standby's state
    assert [r.status for r in reader.sync.list_runs() if r.run_id == run_id] == ["pending"]
    reader.sync.list_steps(run_id)
    reader.sync.list_events(run_id)
    reader.sync.list_signals()
    reader.sync.run(reader.list_stuck())
    reader.sync.run(reader.queue_counts())
    reader.sync.run(reader.list_streams(run_id))
    names = _sql(standby, "SELECT application_name FROM pg_stat_activity")
    assert ("durably-read",) in names
    assert ("durably-read",) not in _sql(primary, "SELECT application_name FROM pg_stat_activity")
    assert writer.sync.get_run(run_id).status == "canceled"
    # A wait for the run's end reads the primary: the standby would keep it pending.
    assert reader.sync.wait(run_id, timeout=scaled(10)).status == "canceled"
    # The CLI's reads: from the standby with --read-database (after the command), not without.
    status = {
        r["run_id"]: r["status"] for r in _cli(primary, "runs", "--read-database", standby.url)
    }
    assert status[run_id] == "pending"
    assert {r["run_id"]: r["status"] for r in _cli(primary, "runs")}[run_id] == "canceled"
    shown = _cli(primary, "show", run_id, DURABLY_READ_DATABASE_URL=standby.url)
    assert shown["run"]["status"] == "pending"


def _cli(primary: pgcluster.Cluster, *args: str, **env: str) -> Any:
    """`durably --database PRIMARY ARGS --json`'s document."""
    done = subprocess.run(
        [sys.executable, "-m", "durably.cli", "--database", primary.url, *args, "--json"],
        capture_output=True, text=True, check=True, timeout=scaled(60),
        env={**os.environ, "DURABLY_READ_DATABASE_URL": "", **env},
    )  # fmt: skip
    return json.loads(done.stdout)


def test_this_clients_writes_are_read_despite_lag(
    pair: tuple[pgcluster.Cluster, pgcluster.Cluster], apps: tuple[Durably, Durably, Skipping]
) -> None:
    primary, standby = pair
    writer, reader, clock = apps
    eventually_sync(lambda: _replayed(primary, standby), what="the standby to replay")
    _sql(standby, "SELECT pg_wal_replay_pause()")
    handle = reader.sync.start("nobody-runs-this", {"n": 2})  # the standby never sees it
    assert reader.sync.get_run(handle.run_id).status == "pending"
    assert handle.run_id in [r.run_id for r in reader.sync.list_runs()]
    reader.sync.cancel(handle.run_id)
    assert reader.sync.get_run(handle.run_id).status == "canceled"
    assert reader.sync.list_runs(status="canceled")[0].run_id == handle.run_id
    # Past the window: a run the standby does not know is read from the primary.
    clock.past_the_window()
    other = writer.sync.start("nobody-runs-this", {"n": 3}).run_id
    assert reader.sync.get_run(other).status == "pending"
    assert reader.sync.list_steps(other) == []
    assert reader.sync.get_run(handle.run_id).status == "canceled"  # unknown there too


def test_a_stopped_replica_leaves_the_reads_to_the_primary(
    pair: tuple[pgcluster.Cluster, pgcluster.Cluster],
    apps: tuple[Durably, Durably, Skipping],
    caplog: pytest.LogCaptureFixture,
) -> None:
    primary, standby = pair
    writer, reader, clock = apps
    run_id = writer.sync.start("nobody-runs-this", {"n": 4}).run_id
    eventually_sync(lambda: _replayed(primary, standby), what="the standby to replay")
    assert reader.sync.get_run(run_id).run_id == run_id  # a pooled connection to it
    standby.stop("fast")
    try:
        with caplog.at_level(logging.WARNING, logger="durably.replica"):
            writer.sync.cancel(run_id)
            assert reader.sync.get_run(run_id).status == "canceled"
            assert reader.sync.list_runs(status="canceled")
            clock.past_the_window()  # the replica is tried again, and fails again
            assert reader.sync.get_run(run_id).status == "canceled"
        down = [r for r in caplog.records if "cannot serve" in r.getMessage()]
        assert len(down) == 1, caplog.text
    finally:
        standby.start()

    def served_again() -> bool:
        clock.past_the_window()
        reader.sync.list_runs()
        return any("serves again" in r.getMessage() for r in caplog.records)

    eventually_sync(served_again, timeout=30, what="the replica to serve the reads again")


def test_sqlite_refuses_a_read_url(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="read_url is for PostgreSQL"):
        Durably(f"sqlite:///{tmp_path}/a.db", read_url="postgresql://127.0.0.1/replica")
    with pytest.raises(ConfigurationError, match="streaming replica"):
        Durably("postgresql://127.0.0.1/app", read_url=f"sqlite:///{tmp_path}/a.db")
