"""Continue-as-new through kill -9 (SPEC §4.23): a worker killed as a run continues leaves
the chain to another, which ends it once: no generation twice, no run left behind."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.acceptance.conftest import Procs
from tests.apps import seed
from tests.helpers import duration, eventually_sync, scaled


def test_a_worker_killed_at_the_continue(procs: Procs, tmp_path: Path) -> None:
    client = seed.app.rebind(procs.url).sync
    marker = tmp_path / "killed"
    lease = ("--lease", duration(1), "--heartbeat", duration(0.3))
    a = procs.worker("A", *lease, KILL_AT_CONTINUE=str(marker))
    first = client.start("chain", 0).run_id
    eventually_sync(lambda: a.poll() is not None, timeout=30, what="A to die at the continue")
    assert marker.exists()
    procs.worker("B", *lease)
    run = client.wait(first, timeout=scaled(60))
    assert run.status == "completed" and run.output == seed.CHAIN_LAST
    runs = client.list_runs(workflow="chain")
    assert Counter(r.status for r in runs) == {"continued": seed.CHAIN_LAST, "completed": 1}
    assert sorted(r.input for r in runs) == list(range(seed.CHAIN_LAST + 1))  # each once
    client.close()
    # The CLI shows the chain's links and lists its continued runs.
    shown = procs.json("show", first)["run"]
    assert shown["status"] == "continued" and "continued_from" not in shown
    second = shown["continued_as"]
    text = procs.cli("show", second).stdout
    assert f"continued_from {first}" in text and "continued_as " in text
    assert len(procs.json("runs", "--status", "continued")) == seed.CHAIN_LAST
