"""A transaction's undo is exactly once (issue 31 item 3): its worker killed (`kill -9`) in
the middle of the undo's transaction, the next worker runs it again and its effect is
committed once, with its record; after a cancel, and under `ctx.step.compensate()`, whose
result names the undo the killed worker had completed before too."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.acceptance.conftest import Procs
from tests.apps import sagas
from tests.helpers import duration, eventually_sync, scaled

APP = "tests.apps.sagas:app"
SHORT_LEASE = ("--lease", duration(2), "--heartbeat", duration(0.5))


@pytest.mark.parametrize("end", ["cancel", "reject"])
def test_kill_9_in_the_middle_of_an_undo_s_transaction_runs_it_exactly_once(
    procs: Procs, tmp_path: Path, end: str
) -> None:
    sagas.setup_business_tables(procs.url)
    entered, hold, released = tmp_path / "entered", tmp_path / "hold", tmp_path / "released"
    hold.touch()
    files = {"DURABLY_APP": APP, "ENTERED_FILE": str(entered), "HOLD_FILE": str(hold),
             "RELEASED_FILE": str(released)}  # fmt: skip
    app = sagas.app.rebind(procs.url)
    client = app.sync
    try:
        a = procs.worker("A", *SHORT_LEASE, **files)
        run_id = client.start("pay", "o1").run_id
        eventually_sync(lambda: client.get_run(run_id).status == "waiting", timeout=20,
                        what="the approval wait")  # fmt: skip
        if end == "cancel":
            client.cancel(run_id)
        else:
            client.send_signal("approval:o1", False)
        eventually_sync(lambda: entered.exists() and entered.read_text(), timeout=20,
                        what="A inside the refund's transaction")  # fmt: skip
        assert sagas.payments(procs.url) == [("o1", "charge")]  # not committed yet
        assert released.read_text() == "o1\n"  # the newer step, undone first
        os.killpg(a.pid, signal.SIGKILL)
        a.wait()
        hold.unlink()
        procs.worker("B", *SHORT_LEASE, **files)
        if end == "cancel":
            eventually_sync(lambda: not client.get_run(run_id).compensating, timeout=30,
                            what="B to finish the compensation")  # fmt: skip
            run = client.get_run(run_id)
            assert run.status == "canceled"
        else:
            run = client.wait(run_id, timeout=scaled(30))
            assert run.status == "completed", run.error
            assert run.output == {"status": "rejected", "undone": ["reserve", "charge"]}
        steps = [(s.step, s.kind, s.status) for s in client.list_steps(run_id)]
    finally:
        client.close()
    assert sagas.payments(procs.url) == [("o1", "charge"), ("o1", "refund")]
    assert len(entered.read_text().split()) == 2  # begun twice (A, then B), committed once
    assert released.read_text() == "o1\n"  # completed and recorded by A: not run again
    assert [s for s in steps if s[0] == "compensate:charge"] == [
        ("compensate:charge", "transaction", "completed")
    ]
