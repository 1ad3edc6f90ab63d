"""A worker frozen inside a `step.transaction` body (issue 26, case 3), on PostgreSQL.

Worker A's body writes the run's library row in the step's transaction and waits there;
A is frozen (SIGSTOP, or its network goes silent through a `FaultProxy`). Worker B must
take the run over once A's lease has expired, and complete it while A is still frozen: the
claim must not wait behind A's open transaction, and the server must end that transaction
(whose row lock B's own insert waits for) within a lease. Thawed, A commits nothing: one
library row, B's, and one completed attempt of the step.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.conftest import Procs
from tests.apps import seed
from tests.faults import FaultProxy
from tests.helpers import eventually_sync, let_go, scaled
from tests.processes import Processes

LEASE_S = 2.0
LEASE = ("--lease", f"{LEASE_S:g}s", "--heartbeat", "0.5s")
TAKEOVER_S = LEASE_S + 6  # the lease, B's start-up, its claim and its step


@pytest.fixture
def pg_procs(pg_url: str, tmp_path: Path, processes: Processes) -> Procs:
    seed.setup_business_tables(pg_url)
    procs = Procs(pg_url, tmp_path, processes)
    procs.cli("migrate")
    return procs


def _status(url: str, run_id: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status FROM durably.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _outcome(url: str, run_id: str) -> tuple[list[str], list[str]]:
    """Who wrote the run's library rows; the statuses of its `register` attempts."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT path FROM biz.library WHERE run_id = %s", (run_id,))
        writers = [str(r[0]) for r in rows]
        attempts = conn.execute(
            "SELECT status FROM durably.step_attempts WHERE run_id = %s AND step = 'register'"
            " ORDER BY attempt",
            (run_id,),
        )
        return writers, [str(r[0]) for r in attempts]


@contextmanager
def _sigstopped(pid: int) -> Iterator[None]:
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pid, signal.SIGCONT)


@contextmanager
def _frozen(proxy: FaultProxy) -> Iterator[None]:
    proxy.freeze()
    try:
        yield
    finally:
        proxy.thaw()


@pytest.mark.parametrize("freeze", ["sigstop", "network"])
def test_a_worker_frozen_inside_a_transaction_holds_up_no_takeover(
    pg_procs: Procs, pg_url: str, fault_proxy: FaultProxy, tmp_path: Path, freeze: str
) -> None:
    marker = tmp_path / "inside-the-transaction"
    url_a = fault_proxy.url_for(pg_url) if freeze == "network" else pg_url
    a = pg_procs.worker("A", *LEASE, TX_MARKER=str(marker), DURABLY_DATABASE_URL=url_a)
    run_id = pg_procs.json("start", "tx-freeze")["run_id"]
    eventually_sync(marker.exists, timeout=30, what="A's body inside its transaction")
    with _sigstopped(a.pid) if freeze == "sigstop" else _frozen(fault_proxy):
        frozen_at = time.monotonic()
        pg_procs.worker("B", *LEASE, TX_MARKER=str(marker))
        eventually_sync(lambda: _status(pg_url, run_id) == "completed", timeout=TAKEOVER_S,
                        what="B to take the run over and complete it, A frozen")  # fmt: skip
        took = time.monotonic() - frozen_at
    print(f"\nB completed the run {took:.1f}s after A froze (lease {LEASE_S:g}s)")
    assert took <= scaled(TAKEOVER_S)
    eventually_sync(lambda: let_go(pg_procs.log("A"), run_id), timeout=30,
                    what="A, thawed, to let go of the run")  # fmt: skip
    assert _outcome(pg_url, run_id) == (["B"], ["completed"])
