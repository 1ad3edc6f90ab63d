"""Worker processes: SIGTERM drains and releases at once; a worker killed while
compensating leaves the rest to another, each compensation running once."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from durably import Durably
from tests.acceptance.conftest import ROOT, Procs
from tests.apps import seed
from tests.helpers import duration, eventually_sync, run_command, scaled


def _events(url: str, run_id: str) -> list[tuple[str, str, str]]:
    return [(s, w, e) for rid, s, w, e, _ in seed.read_ledger(url) if rid == run_id]


def test_sigterm_releases_held_runs_at_once(procs: Procs) -> None:
    client = seed.app.rebind(procs.url).sync
    a = procs.worker("A", "--grace", "0.5s", "--lease", duration(60))
    run_id = client.start("slow", "async").run_id
    eventually_sync(lambda: ("long", "A", "start") in _events(procs.url, run_id), timeout=20,
                    what="A to start the long step")  # fmt: skip
    procs.worker("B", "--lease", duration(60))
    released = time.monotonic()
    a.send_signal(signal.SIGTERM)
    assert a.wait(timeout=scaled(15)) == 0
    eventually_sync(lambda: ("long", "B", "start") in _events(procs.url, run_id), timeout=20,
                    what="B to take the released run")  # fmt: skip
    assert time.monotonic() - released < scaled(15)  # not after A's lease, scaled(60)
    client.cancel(run_id)
    client.close()


def test_a_drain_keeps_a_run_whose_sync_body_still_runs(procs: Procs, tmp_path: Path) -> None:
    """A thread cannot be interrupted: SIGTERM with --grace 1s while a 3 s sync body runs.
    The draining worker keeps the run (renewing its lease) until the body has returned and
    its outcome is recorded, then exits; the body never runs on two workers at once."""
    effects = tmp_path / "effects"
    effects.touch()
    client = seed.app.rebind(procs.url).sync
    try:
        _drain_while_a_sync_body_runs(procs, client, effects)
    finally:
        client.close()


def _drain_while_a_sync_body_runs(procs: Procs, client: Any, effects: Path) -> None:
    short = ("--lease", duration(2), "--heartbeat", duration(0.5))
    go = effects.with_name("go")  # the body's 3 s begin once A has been told to stop
    a = procs.worker("A", "--grace", "1s", *short, EFFECT_FILE=str(effects), GO_FILE=str(go))
    run_id = client.start("stubborn", 3.0).run_id
    eventually_sync(lambda: "A start" in effects.read_text(), timeout=20,
                    what="A to begin the sync body")  # fmt: skip
    b = procs.worker("B", *short, EFFECT_FILE=str(effects))
    eventually_sync(lambda: "worker B started" in procs.log("B"), timeout=20, what="B to start")
    a.send_signal(signal.SIGTERM)
    go.touch()
    assert a.wait(timeout=scaled(30)) == 0
    marks = [line.split() for line in effects.read_text().splitlines()]
    assert [m[:2] for m in marks] == [["A", "start"], ["A", "end"]]  # A exited after its end
    run = client.wait(run_id, timeout=scaled(30))
    assert run.status == "completed" and run.output == "A"
    assert [line.split()[:2] for line in effects.read_text().splitlines()] == [
        ["A", "start"], ["A", "end"]]  # fmt: skip
    done = [s for s in client.list_steps(run_id) if s.step == "uninterruptible"]
    assert [(s.status, s.worker_id) for s in done] == [("completed", "A")]
    assert [w for _, w, _ in _events(procs.url, run_id)] == ["B"]  # B ran only what followed
    b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=scaled(30)) == 0


def test_worker_killed_while_compensating(procs: Procs, tmp_path: Path) -> None:
    client = seed.app.rebind(procs.url).sync
    marker = tmp_path / "killed"
    lease = ("--lease", duration(1), "--heartbeat", duration(0.3))
    a = procs.worker("A", *lease, KILL_IN_UNDO=str(marker))
    run_id = client.start("saga").run_id
    eventually_sync(lambda: a.poll() is not None, timeout=30, what="A to die compensating")
    assert marker.exists()
    procs.worker("B", *lease)
    run = client.wait(run_id, timeout=scaled(30))
    assert run.status == "failed" and run.error is not None and "boom" in run.error["message"]
    undos = [(e, w) for _, w, e in _events(procs.url, run_id) if e.startswith("undo")]
    assert undos == [("undo-b", "A"), ("undo-a", "B")]
    names = [s.step for s in client.list_steps(run_id) if s.status == "completed"]
    assert names.count("compensate:b") == 1 and names.count("compensate:a") == 1
    client.close()


def test_acquire_demo_runs_on_a_fresh_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "DURABLY_DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT)
    env["UV"] = "uv"  # run by `uv run` (which sets it), as the README says
    done = subprocess.run([sys.executable, "-m", "acquire.cli", "demo", "--size-mb", "2",
                           "--workdir", str(tmp_path / "work")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=scaled(120))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported as hard links" in done.stdout and "1 library row" in done.stdout
    assert (tmp_path / "durably.db").exists()  # the embedded SQLite default
    runs = Durably(f"sqlite:///{tmp_path}/durably.db").sync.list_runs()
    assert {r.workflow: r.status for r in runs} == {
        "acquire": "completed",
        "acquire-watch": "completed",
    }
    # The hint works from the repository (not the demo's directory), without an activated
    # environment: `uv run durably ...` on the demo's database.
    hint = next(line for line in done.stdout.splitlines() if "see it again" in line)
    command = shlex.split(hint.partition(": ")[2])
    assert command[:3] == ["uv", "run", "durably"], hint
    shown = run_command("durably.cli", (*command[3:], "--json"), env, ROOT, check=True)
    assert json.loads(shown.stdout)["run"]["workflow"] == "acquire"
