"""Starting by name from a thin client (issue 31 item 9): a process with `Durably(url)`
alone starts `place-order` without its code; a worker process that has it binds the
newest version at its first claim, validates the input there and runs it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import ROOT
from tests.helpers import eventually_sync, run_command
from tests.processes import Processes

APP = "tests.apps.byname:app"


class ByName:
    """Thin-client starts, a worker with the code, and CLI queries, on one database."""

    def __init__(self, url: str, logs: Path, processes: Processes) -> None:
        self.url, self.logs, self.processes = url, logs, processes
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLY_")}
        self.env.update(DURABLY_DATABASE_URL=url, PYTHONPATH=str(ROOT))

    def thin(self, name: str, value: Any, key: str | None = None) -> Any:
        """Start through a process that imports no workflow code; the run, or the error."""
        args = (name, json.dumps(value), *([key] if key else []))
        done = run_command("tests.apps.thin", args, self.env, ROOT, check=False)
        if done.returncode != 0:
            return done.stdout.strip()
        return json.loads(done.stdout)

    def worker(self) -> None:
        cmd = [sys.executable, "-m", "durably.cli", "worker", "--app", APP, "--id", "w1"]
        self.processes.start(cmd, self.logs / "w1.log", env=self.env, cwd=ROOT)

    def cli(self, *args: str) -> Any:
        done = run_command("durably.cli", (*args, "--json"), self.env, ROOT, check=True)
        return json.loads(done.stdout)

    def ended(self, run_id: str) -> dict[str, Any]:
        def check() -> Any:
            run = self.cli("show", run_id)["run"]
            return run if run["status"] in ("completed", "failed", "canceled") else None

        found: dict[str, Any] = eventually_sync(check, timeout=30, what=f"run {run_id} ended")
        return found


def _by_name(url: str, tmp_path: Path, processes: Processes) -> ByName:
    b = ByName(url, tmp_path, processes)
    run_command("durably.cli", ("migrate",), b.env, ROOT, check=True)
    return b


def test_a_thin_client_starts_by_name_and_a_worker_runs_it(
    db_url: str, tmp_path: Path, processes: Processes
) -> None:
    b = _by_name(db_url, tmp_path, processes)
    order = {"id": "o1", "amount": 30}
    started = b.thin("place-order", order, key="order-o1")
    assert started["status"] == "pending" and started["version"] in ("", None)
    assert b.thin("place-order", order, key="order-o1")["run_id"] == started["run_id"]
    conflict = b.thin("place-order", {"id": "o1", "amount": 31}, key="order-o1")
    assert conflict.startswith("IdempotencyConflictError"), conflict
    bad = b.thin("place-order", {"id": "o2", "amount": "thirty"})
    assert bad["status"] == "pending"  # nothing here to validate it with

    b.worker()
    done = b.ended(started["run_id"])
    assert done["status"] == "completed", done
    assert done["version"] == "v2"  # the newest registered, bound at the claim
    assert done["output"] == "charged 30 for o1"

    failed = b.ended(bad["run_id"])
    assert failed["status"] == "failed" and failed["version"] == "v2"
    assert failed["error"]["type"] == "InvalidInput" and "amount" in failed["error"]["message"]
    assert failed["attempts"] == 1  # v2 retries 3 times; a bad input is not retried


def test_a_name_no_worker_registers_stays_pending_and_is_listed_stuck(
    db_url: str, tmp_path: Path, processes: Processes
) -> None:
    b = _by_name(db_url, tmp_path, processes)
    b.worker()
    lost = b.thin("plaec-order", {"id": "o1", "amount": 30})  # a typo
    served = b.thin("place-order", {"id": "o2", "amount": 5})
    assert b.ended(served["run_id"])["status"] == "completed"
    run = b.cli("show", lost["run_id"])["run"]
    assert run["status"] == "pending" and run["attempts"] == 0
    stuck = [r["run_id"] for r in b.cli("runs", "--stuck")]
    assert stuck == [lost["run_id"]]
