"""Fixtures for acquire: a workspace, `acquire` CLI calls and worker subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_command
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


@pytest.fixture
def acq(db_url: str, tmp_path: Path, processes: Processes) -> Acquire:
    return Acquire(db_url, tmp_path, processes)
