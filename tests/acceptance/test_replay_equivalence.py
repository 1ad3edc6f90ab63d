"""Real worker processes, killed at random points, must end every run exactly as an
uninterrupted execution would (SPEC §4.12, §4.13), and a finished step's record never
waits for its sibling."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from durably import SyncDurably
from tests.acceptance.conftest import Procs
from tests.apps import programs, seed
from tests.helpers import eventually_sync, scaled

APP = {"DURABLY_APP": "tests.apps.programs:app"}
LEASE = ("--lease", "2s", "--heartbeat", "0.4s", "--grace", "1s")


@pytest.fixture
def client(procs: Procs) -> Any:
    app = seed.app.rebind(procs.url)
    yield app.sync
    app.sync.close()


def _executions(url: str, run_id: str, step: str, event: str) -> list[tuple[Any, ...]]:
    return [r for r in seed.read_ledger(url) if r[0] == run_id and r[1] == step and r[3] == event]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_finished_step_survives_a_crash_while_its_sibling_runs(
    procs: Procs, client: SyncDurably, tmp_path: Path, how: signal.Signals
) -> None:
    marker = tmp_path / "copy-may-finish"
    a = procs.worker("A", *LEASE, **APP)
    run_id = client.start("pair", str(marker)).run_id

    def charge_recorded() -> bool:
        steps = {s.step: s.status for s in client.list_steps(run_id)}
        started = _executions(procs.url, run_id, "copy", "start")
        return steps.get("charge") == "completed" and bool(started)

    eventually_sync(charge_recorded, timeout=20, what="charge recorded while copy runs")
    os.killpg(a.pid, how)
    a.wait(timeout=scaled(30))
    procs.worker("B", *LEASE, **APP)
    marker.touch()
    run = client.wait(run_id, timeout=scaled(30))
    assert run.status == "completed" and run.output == ["charged", "copied"]
    assert len(_executions(procs.url, run_id, "charge", "run")) == 1


def test_random_programs_end_as_uninterrupted_ones_despite_kills(
    procs: Procs, client: SyncDurably
) -> None:
    base = int(os.environ.get("DURABLY_TEST_SEED", random.randrange(10**6)))
    seeds = [base + i for i in range(10)]
    workers: dict[str, subprocess.Popen[bytes]] = {}
    for name in ("A", "B"):
        workers[name] = procs.worker(name, *LEASE, "--concurrency", "8", **APP)
    runs = {client.start("program", {"seed": s}).run_id: s for s in seeds}
    rng = random.Random(base)
    killed: set[str] = set()
    for k in range(6):
        victim = rng.choice(sorted(workers))
        if all(client.get_run(r).terminal for r in runs):
            break
        time.sleep(rng.uniform(0.2, 0.9))  # a random moment to kill at, not a wait
        os.killpg(workers[victim].pid, signal.SIGKILL)
        workers[victim].wait()
        killed.add(victim)
        del workers[victim]
        fresh = f"{victim[0]}{k}"
        workers[fresh] = procs.worker(fresh, *LEASE, "--concurrency", "8", **APP)

    every = [client.wait(r, timeout=scaled(90)) for r in runs]
    report = f"(seed base {base}; reproduce with DURABLY_TEST_SEED={base})"
    for run in every:
        assert run.status == "completed", f"{run.run_id} {run.error} {report}"
        assert run.output == programs.expected(runs[run.run_id]), report
    all_runs = client.list_runs(limit=1000)
    ledger = defaultdict(list)
    for run_id, step, worker, event, fence in seed.read_ledger(procs.url):
        if event == "run":
            ledger[(run_id, step)].append((worker, fence))
    for run in all_runs:
        assert run.status == "completed", f"{run.run_id} {run.error} {report}"
        steps = client.list_steps(run.run_id)
        final = {s.step: s for s in steps if s.status in ("completed", "failed")}
        tree = programs.build(run.input["seed"], depth=run.input.get("depth", 0))
        want = sorted(programs.history(tree))
        got = sorted({(s.step, s.kind, s.status) for s in final.values()})
        assert got == want, report
        assert not [s for s in steps if s.status == "running"], report
        for name, rec in final.items():
            runs_of = ledger.get((run.run_id, name), [])
            # Never run again once recorded; repeated only where a killed worker ran it.
            assert all(fence <= rec.fence for _, fence in runs_of), (name, runs_of, report)
            earlier = [w for w, fence in runs_of if fence < rec.fence]
            assert set(earlier) <= killed, (name, runs_of, killed, report)


@pytest.mark.parametrize("workflow", ["values", "values-sync"])
def test_values_read_before_a_kill_are_replayed_by_the_worker_that_takes_over(
    procs: Procs, client: SyncDurably, tmp_path: Path, workflow: str
) -> None:
    """ctx.now(), ctx.random() and ctx.uuid4() read before a step are durable before it
    starts: killed while that step runs, the run's next owner replays the same values, so
    the step runs again with what it was handed the first time (issue 31 item 5)."""
    marker = tmp_path / "use-may-finish"
    a = procs.worker("A", *LEASE, **APP)
    run_id = client.start(workflow, str(marker)).run_id

    def starts() -> list[tuple[str, str]]:
        return [(r[2], r[3].removeprefix("start:")) for r in seed.read_ledger(procs.url)
                if r[0] == run_id and r[1] == "use"]  # fmt: skip

    eventually_sync(lambda: bool(starts()), timeout=20, what="step 'use' running on A")
    os.killpg(a.pid, signal.SIGKILL)
    a.wait(timeout=scaled(30))
    procs.worker("B", *LEASE, **APP)
    eventually_sync(lambda: len(starts()) == 2, timeout=30, what="step 'use' run again on B")
    marker.touch()
    run = client.wait(run_id, timeout=scaled(30))
    assert run.status == "completed", run.error
    read = "|".join(run.output[:3])
    assert starts() == [("A", read), ("B", read)]
    recorded = [s for s in client.list_steps(run_id) if s.kind == "value"]
    assert [s.step for s in recorded] == ["now", "random", "uuid4", "uuid4"]
    assert [s.worker_id for s in recorded] == ["A", "A", "A", "B"]
    now, rand, first, last = (s.output for s in recorded)
    assert [now, repr(rand), first, last] == run.output
