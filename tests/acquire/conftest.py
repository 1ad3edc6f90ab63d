"""Fixtures for acquire: a workspace, `acquire` CLI calls and worker subprocesses; a
failed test's report ends with what its fixtures can tell about why (`diagnostics`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_command, tail
from tests.processes import Processes

ROOT = Path(__file__).resolve().parents[2]


class Acquire:
    """Runs `acquire` commands and workers against one database and workspace; the
    workers belong to `processes`, which stops them."""

    def __init__(self, url: str, work: Path, processes: Processes, **env: str) -> None:
        self.url = url
        self.work = work
        self.processes = processes
        self.base_env = env

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, DURABLY_DATABASE_URL=self.url, PYTHONPATH=str(ROOT),
                   ACQUIRE_POLL="0.5s", ACQUIRE_POLL_MAX="1s")  # fmt: skip
        env.update(self.base_env)
        env.update(extra)
        return env

    def cli(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return run_command("acquire.cli", args, self.env(**env), self.work, check)

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.cli(*args, "--json", check=True, **env).stdout)

    def cli_argv(self) -> list[str]:
        return [sys.executable, "-m", "acquire.cli"]

    def worker(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "acquire.cli", "worker", *args]
        return self.processes.start(cmd, self.work / f"worker-{name}.log",
                                    env=self.env(**env), cwd=self.work)  # fmt: skip

    def order(self, order_id: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = self.json("status", order_id)
        return found[0]

    def _quietly(self, module: str, *args: str) -> str:
        """A diagnostic command's output, or why there is none: it never raises."""
        try:
            done = run_command(module, args, self.env(), self.work, check=False, timeout=30)
        except subprocess.TimeoutExpired as exc:
            return f"({exc})"
        if done.returncode != 0:
            return f"(exited {done.returncode}: {done.stdout.strip()} {done.stderr.strip()})"
        return done.stdout.strip()

    def diagnostics(self) -> str:
        """The orders, every run with what it waits for (and the steps of those not
        finished), the stored signals, and the tail of each worker's log."""
        parts = ["orders: " + self._quietly("acquire.cli", "status", "--json"), "runs:"]
        runs = self._quietly("durably.cli", "runs", "--json")
        if not runs.startswith("["):
            parts.append(runs)  # why there is no list
        for r in json.loads(runs) if runs.startswith("[") else []:
            parts.append(f"{r['run_id']} {r['workflow']} {r['status']} "
                         f"waiting_for={r['waiting_for']}")  # fmt: skip
            if r["status"] in ("pending", "running", "waiting"):
                shown = self._quietly("durably.cli", "show", r["run_id"], "--json")
                steps = json.loads(shown)["steps"] if shown.startswith("{") else []
                parts += [f"  {s['step']} #{s['attempt']} {s['status']} {_brief(s)}"
                          for s in steps] or [f"  {shown}"]  # fmt: skip
        parts.append("signals: " + self._quietly("durably.cli", "signals", "--all", "--json"))
        parts += [tail(log) for log in sorted(self.work.glob("worker-*.log"))]
        return "\n".join(parts)


def _brief(step: dict[str, Any]) -> str:
    """A step's error or output, less a watch's state (what it saw is in `status`)."""
    shown = step["error"] or step["output"]
    if isinstance(shown, dict):
        shown = {k: v for k, v in shown.items() if k != "watch"}
    return json.dumps(shown)[:400]


@pytest.fixture
def acq(db_url: str, tmp_path: Path, processes: Processes) -> Acquire:
    return Acquire(db_url, tmp_path, processes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport,
                                                               pytest.TestReport]:  # fmt: skip
    """A failed test's report gets a section from each fixture of it that has
    `diagnostics()`, taken while the test's processes still run."""
    report = yield
    if report.failed and report.when == "call":
        for name, value in getattr(item, "funcargs", {}).items():
            if hasattr(value, "diagnostics"):
                try:
                    text = value.diagnostics()
                except Exception as exc:  # a hook that raised would end the whole session
                    text = f"could not be taken: {exc!r}"
                report.sections.append((f"diagnostics: {name}", text))
    return report
