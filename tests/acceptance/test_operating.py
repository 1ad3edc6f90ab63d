"""Operating runs with real worker processes (§4.18): a run started on old code, parked,
continued by a worker running patched code; resumed after a fix; forked onto a new version."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import Procs
from tests.helpers import eventually_sync, scaled

APP = "tests.apps.operating:app"


def _ran(log: Path, run_id: str) -> Counter[str]:
    if not log.exists():
        return Counter()
    return Counter(line.split()[1] for line in log.read_text().splitlines()
                   if line.startswith(run_id))  # fmt: skip


def test_patch_resume_and_fork_across_deploys(procs: Procs, tmp_path: Path) -> None:
    log = tmp_path / "ran.log"
    env: dict[str, Any] = {"DURABLY_APP": APP, "RAN_LOG": str(log)}

    def status(run_id: str) -> str:
        return str(procs.json("show", run_id, **env)["run"]["status"])

    old_code = procs.worker("old", **env)
    run_id = procs.json("start", "order", "--input", "1", "--version", "v1", **env)["run_id"]
    eventually_sync(lambda: status(run_id) == "waiting", what="the run parked on old code")
    old_code.send_signal(signal.SIGTERM)
    old_code.wait(timeout=scaled(20))

    # The deploy: patched code, `charge` still broken. The run passed "pre-check" before
    # the patch (False), and reaches "audit" for the first time (True).
    patched = procs.worker("patched", PATCHED="1", **env)
    procs.json("signal", "go:1", "--data", '"paid"', **env)
    eventually_sync(lambda: status(run_id) == "failed", what="charge failing for good")
    assert _ran(log, run_id) == {"reserve": 1, "audit": 1, "charge": 2}
    patched.send_signal(signal.SIGTERM)
    patched.wait(timeout=scaled(20))

    # The fix: resume continues from the last completed step, with a fresh budget.
    procs.worker("fixed", PATCHED="1", FIXED="1", **env)
    resumed = procs.json("resume", run_id, **env)
    assert resumed["run_id"] == run_id and resumed["status"] == "pending"
    eventually_sync(lambda: status(run_id) == "completed", what="the resumed run")
    shown = procs.json("show", run_id[:12], **env)
    assert shown["run"]["output"] == [1, "paid", "audited", "charged"]
    assert _ran(log, run_id) == {"reserve": 1, "audit": 1, "charge": 3}
    kinds = [(s["step"], s["kind"]) for s in shown["steps"] if s["kind"] == "patch"]
    assert kinds == [("audit", "patch")]

    again = procs.cli("resume", run_id, check=False, **env)
    assert again.returncode == 2 and "completed" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    # Fork onto v2 from the first two steps: reserve and the signal are kept.
    before = len(procs.json("runs", **env))
    bad = procs.cli("fork", run_id, "--from", "9", "--version", "v2", check=False, **env)
    assert bad.returncode == 2 and "log has 5 entries" in bad.stderr
    assert len(procs.json("runs", **env)) == before
    forked = procs.json("fork", run_id, "--from", "2", "--version", "v2", **env)
    assert forked["run_id"] != run_id and forked["version"] == "v2"
    eventually_sync(lambda: status(forked["run_id"]) == "completed", what="the fork")
    assert procs.json("show", forked["run_id"], **env)["run"]["output"] == [
        1, "paid", "charged-v2"]  # fmt: skip
    assert _ran(log, forked["run_id"]) == {"charge-v2": 1}


def test_resume_never_runs_a_completed_step_again(procs: Procs, tmp_path: Path) -> None:
    """A caught failure, then a step that completed, then one that failed for good: the
    resumed run, on a fixed worker, replays the caught failure (the code takes its except
    path again), keeps the completed step and gives the failed one a fresh budget."""
    log = tmp_path / "ran.log"
    env: dict[str, Any] = {"DURABLY_APP": APP, "RAN_LOG": str(log)}

    def status(run_id: str) -> str:
        return str(procs.json("show", run_id, **env)["run"]["status"])

    broken = procs.worker("broken", **env)
    run_id = procs.json("start", "shipment", "--input", "7", **env)["run_id"]
    eventually_sync(lambda: status(run_id) == "failed", what="ship failing for good")
    assert _ran(log, run_id) == {"hold": 1, "charge-card": 1, "ship": 2}
    broken.send_signal(signal.SIGTERM)
    broken.wait(timeout=scaled(20))

    procs.worker("fixed", FIXED="1", **env)
    procs.json("resume", run_id, **env)
    eventually_sync(lambda: status(run_id) == "completed", what="the resumed run")
    shown = procs.json("show", run_id, **env)
    assert shown["run"]["output"] == ["no hold", "charged 7", "shipped"]
    assert shown["run"]["resumes"] == [2]
    assert _ran(log, run_id) == {"hold": 1, "charge-card": 1, "ship": 3}


def _children(procs: Procs, parent: str, env: dict[str, Any]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = procs.json("runs", "--limit", "100", **env)
    return [r for r in runs if r.get("parent_run_id") == parent]


def test_resuming_a_parent_resumes_its_child_never_a_new_one(procs: Procs, tmp_path: Path) -> None:
    """A child failed for good, so did its parent. `durably resume` of the parent resumes
    that child (its charge is not run again); a child resumed first is the one the resumed
    parent waits for."""
    log = tmp_path / "ran.log"
    env: dict[str, Any] = {"DURABLY_APP": APP, "RAN_LOG": str(log)}

    def status(run_id: str) -> str:
        return str(procs.json("show", run_id, **env)["run"]["status"])

    broken = procs.worker("broken", **env)
    parents = [procs.json("start", "checkout", "--input", str(n), **env)["run_id"] for n in (1, 2)]
    eventually_sync(lambda: all(status(p) == "failed" for p in parents), what="the parents failing")
    broken.send_signal(signal.SIGTERM)
    broken.wait(timeout=scaled(20))
    (first,), (second,) = [_children(procs, p, env) for p in parents]
    assert _ran(log, first["run_id"]) == {"charge-child": 1, "ship-child": 2}

    procs.worker("fixed", FIXED="1", **env)
    procs.json("resume", parents[0], **env)  # the parent alone
    procs.json("resume", second["run_id"], **env)  # the child first, then its parent
    eventually_sync(lambda: status(second["run_id"]) == "completed", what="the resumed child")
    procs.json("resume", parents[1], **env)
    eventually_sync(
        lambda: all(status(p) == "completed" for p in parents), what="the resumed parents"
    )
    for n, (parent, kid) in enumerate(zip(parents, (first, second), strict=True), 1):
        assert procs.json("show", parent, **env)["run"]["output"] == [f"charged {n}", "shipped"]
        assert [c["run_id"] for c in _children(procs, parent, env)] == [kid["run_id"]]
        assert _ran(log, kid["run_id"]) == {"charge-child": 1, "ship-child": 3}


def test_a_workflow_retry_waits_for_the_child_its_failed_attempt_started(
    procs: Procs, tmp_path: Path
) -> None:
    """The parent's first attempt fails while its child waits; the retry does not start a
    second child doing the same work: it waits for the first one."""
    log = tmp_path / "ran.log"
    env: dict[str, Any] = {"DURABLY_APP": APP, "RAN_LOG": str(log)}

    def shown(run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = procs.json("show", run_id, **env)["run"]
        return run

    procs.worker("w", **env)
    parent = procs.json("start", "retried", "--input", "5", **env)["run_id"]
    eventually_sync(
        lambda: shown(parent)["attempts"] == 2 and shown(parent)["status"] == "waiting",
        what="the retried parent waiting",
    )
    procs.json("signal", "finish:5", **env)
    eventually_sync(lambda: shown(parent)["status"] == "completed", what="the parent")
    assert shown(parent)["output"] == "finished 5"
    children = _children(procs, parent, env)
    assert len(children) == 1, children
    assert _ran(log, children[0]["run_id"]) == {"charge-child": 1}


def test_a_workflow_retry_receives_again_the_signal_its_cut_dropped(
    procs: Procs, tmp_path: Path
) -> None:
    """The first attempt takes its signal after a caught failure, then fails; the retry
    starts from before the caught failure, and its wait receives the same signal, sent
    once (a worker process, the signal sent with the CLI)."""
    log = tmp_path / "ran.log"
    env: dict[str, Any] = {"DURABLY_APP": APP, "RAN_LOG": str(log)}

    def shown(run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = procs.json("show", run_id, **env)["run"]
        return run

    procs.worker("w", **env)
    run_id = procs.json("start", "approval", "--input", "3", **env)["run_id"]
    eventually_sync(lambda: shown(run_id)["status"] == "waiting", what="the wait")
    procs.json("signal", "approve:3", "--data", '{"by": "ann"}', **env)
    eventually_sync(lambda: shown(run_id)["status"] == "completed", what="the retried run")
    assert shown(run_id)["attempts"] == 2
    assert shown(run_id)["output"] == ["held", {"by": "ann"}]
    assert procs.json("signals", **env) == []  # taken again: nothing left buffered
