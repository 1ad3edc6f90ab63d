"""Real processes: `durably` CLI calls and worker subprocesses on the seed app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps import seed
from tests.helpers import run_command, stop_processes

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.apps.seed:app"


class Procs:
    """Start workers and run CLI commands against one database; cleans up after."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.workers: list[subprocess.Popen[str]] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, DURABLY_DATABASE_URL=self.url, DURABLY_APP=APP,
                   PYTHONPATH=str(ROOT))  # fmt: skip
        env.update(extra)
        return env

    def worker(self, name: str, *args: str, **env: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "durably.cli", "worker", "--id", name, *args]
        with open(self.logs / f"{name}.log", "a") as log:
            proc = subprocess.Popen(
                cmd, env=self.env(WORKER_NAME=name, **env), cwd=ROOT, text=True,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.workers.append(proc)
        return proc

    def log(self, name: str) -> str:
        """What worker `name` has printed so far."""
        return (self.logs / f"{name}.log").read_text()

    def cli(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return run_command("durably.cli", args, self.env(**env), ROOT, check)

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.cli(*args, "--json", check=True, **env).stdout)

    def stop_all(self) -> None:
        stop_processes(self.workers)


@pytest.fixture
def procs(db_url: str, tmp_path: Path) -> Iterator[Procs]:
    seed.setup_business_tables(db_url)
    p = Procs(db_url, tmp_path)
    p.cli("migrate")
    try:
        yield p
    finally:
        p.stop_all()
