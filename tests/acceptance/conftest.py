"""Real processes: `durably` CLI calls and worker subprocesses on the seed app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.apps import seed
from tests.helpers import run_command
from tests.processes import Processes

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.apps.seed:app"


class Procs:
    """Start workers and run CLI commands against one database; the workers belong to
    `processes`, which stops them."""

    def __init__(self, url: str, logs: Path, processes: Processes) -> None:
        self.url = url
        self.logs = logs
        self.processes = processes

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, DURABLY_DATABASE_URL=self.url, DURABLY_APP=APP,
                   PYTHONPATH=str(ROOT))  # fmt: skip
        env.update(extra)
        return env

    def worker(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "durably.cli", "worker", "--id", name, *args]
        return self.processes.start(cmd, self.logs / f"{name}.log",
                                    env=self.env(WORKER_NAME=name, **env), cwd=ROOT)  # fmt: skip

    def log(self, name: str) -> str:
        """What worker `name` has printed so far."""
        return (self.logs / f"{name}.log").read_text()

    def cli(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return run_command("durably.cli", args, self.env(**env), ROOT, check)

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.cli(*args, "--json", check=True, **env).stdout)


@pytest.fixture
def procs(db_url: str, tmp_path: Path, processes: Processes) -> Procs:
    seed.setup_business_tables(db_url)
    p = Procs(db_url, tmp_path, processes)
    p.cli("migrate")
    return p
