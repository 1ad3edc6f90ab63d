"""`ctx.step.set_attributes` across worker processes (SPEC §4.24): with three workers and
one killed (kill -9) just after a run's first set, every run records each set once, and
its attributes are the merge of them in order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.acceptance.conftest import Procs
from tests.apps import seed
from tests.helpers import duration, eventually_sync, scaled

RUNS = 12


def test_attributes_are_set_once_by_three_workers_one_killed(procs: Procs, tmp_path: Path) -> None:
    client = seed.app.rebind(procs.url).sync
    marker = tmp_path / "killed"
    lease = ("--lease", duration(1), "--heartbeat", duration(0.3))
    doomed = procs.worker("A", *lease, KILL_AFTER_ATTRIBUTES=str(marker))
    first = client.start("tagged", 0, attributes={"customer": "c-0"}).run_id
    eventually_sync(lambda: doomed.poll() is not None, timeout=30, what="A to die")
    assert marker.exists()
    for name in ("B", "C", "D"):
        procs.worker(name, *lease)
    ids = [first] + [
        client.start("tagged", n, attributes={"customer": f"c-{n}"}).run_id for n in range(1, RUNS)
    ]
    for run_id in ids:
        assert client.wait(run_id, timeout=scaled(60)).status == "completed"
    for n, run_id in enumerate(ids):
        run = client.get_run(run_id)
        assert run.attributes["customer"] == f"c-{n}" and run.attributes["stage"] == "done"
        assert run.attributes["n"] == n and run.attributes["by"] in ("B", "C", "D")
        sets = Counter(s.position for s in client.list_steps(run_id) if s.kind == "attributes")
        assert sets == {1: 1, 3: 1}, (run_id, sets)  # each set recorded once
    found = client.list_runs(attributes={"stage": "done", "customer": "c-0"})
    assert [r.run_id for r in found] == [first]
    client.close()
