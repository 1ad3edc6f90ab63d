"""Fixtures for acquire: a workspace, `acquire` CLI calls and worker subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_command, stop_processes

ROOT = Path(__file__).resolve().parents[2]


class Acquire:
    """Runs `acquire` commands and workers against one database and workspace."""

    def __init__(self, url: str, work: Path, **env: str) -> None:
        self.url = url
        self.work = work
        self.base_env = env
        self.workers: list[subprocess.Popen[bytes]] = []

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

    def worker(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.work / f"worker-{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "acquire.cli", "worker", *args], env=self.env(**env),
                cwd=self.work, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.workers.append(proc)
        return proc

    def order(self, order_id: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = self.json("status", order_id)
        return found[0]

    def stop_all(self) -> None:
        stop_processes(self.workers)


@pytest.fixture
def acq(db_url: str, tmp_path: Path) -> Iterator[Acquire]:
    a = Acquire(db_url, tmp_path)
    try:
        yield a
    finally:
        a.stop_all()
