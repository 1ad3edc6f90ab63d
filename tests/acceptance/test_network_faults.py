"""A worker whose network to PostgreSQL goes silent (issue 11): the lease clock keeps
running on the worker's side, so its step body stops before another worker can take over.

Worker A reaches the database through a `FaultProxy` (its ledger, direct); the proxy
freezes: no error, no reply, nothing. A cannot renew, B (direct) claims once the lease
has expired, and A's body must have stopped by then.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.conftest import Procs
from tests.apps import seed
from tests.faults import FaultProxy
from tests.helpers import eventually_sync
from tests.processes import Processes

LEASE = ("--lease", "2s", "--heartbeat", "0.5s")


@pytest.fixture
def pg_procs(pg_url: str, tmp_path: Path, processes: Processes) -> Procs:
    seed.setup_business_tables(pg_url)
    procs = Procs(pg_url, tmp_path, processes)
    procs.cli("migrate")
    return procs


def _events(url: str, run_id: str) -> list[tuple[str, str, datetime]]:
    with psycopg.connect(url) as conn:
        return list(conn.execute(
            "SELECT worker, event, at FROM biz.ledger WHERE run_id = %s ORDER BY at", (run_id,)
        ))  # fmt: skip


def _run(url: str, run_id: str) -> tuple[str, str | None, datetime | None]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT status, worker_id, lease_expires_at FROM durably.runs WHERE id = %s",
            (run_id,),
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_a_silent_network_stops_the_body_before_another_worker_takes_over(
    pg_procs: Procs, pg_url: str, fault_proxy: FaultProxy
) -> None:
    pg_procs.worker("A", *LEASE, DURABLY_DATABASE_URL=fault_proxy.url_for(pg_url),
                    LEDGER_URL=pg_url)  # fmt: skip
    run_id = pg_procs.json("start", "ticker")["run_id"]
    eventually_sync(lambda: [e[:2] for e in _events(pg_url, run_id)].count(("A", "tick")) >= 3,
                    timeout=30, what="A's body to tick")  # fmt: skip
    try:
        fault_proxy.freeze()
        _, holder, expires_at = _run(pg_url, run_id)  # A can renew no more
        assert holder == "A" and expires_at is not None
        pg_procs.worker("B", *LEASE, TICK_SECONDS="0.5")
        eventually_sync(lambda: _run(pg_url, run_id)[0] == "completed", timeout=30,
                        what="B to take the run over and finish it")  # fmt: skip
        events = _events(pg_url, run_id)
    finally:
        fault_proxy.thaw()
    b_started = next(at for worker, event, at in events if (worker, event) == ("B", "start"))
    a_events = [(event, at) for worker, event, at in events if worker == "A"]
    a_ticks = [at for event, at in a_events if event == "tick"]
    assert [event for event, _ in a_events if event != "tick"] == ["start", "stopped"]
    assert max(a_ticks) <= b_started + timedelta(seconds=seed.TICK_S)  # a tick's margin
    a_last = max(at for _, at in a_events)
    print(f"\nA's lease expired at {expires_at:%T.%f}; its last tick {max(a_ticks):%T.%f}, "
          f"its body's last line {a_last:%T.%f} ({(a_last - expires_at).total_seconds():+.3f}s"
          f" after the expiry); B started the step at {b_started:%T.%f}")  # fmt: skip
    assert a_last <= b_started
