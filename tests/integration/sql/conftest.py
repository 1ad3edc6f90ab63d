"""The SQL functions (SPEC §4.25), called by a client that is not Python: `psql`, one
process per call, its script sent whole (BEGIN ... COMMIT included). PostgreSQL only."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from tests.helpers import scaled


@dataclass
class Psql:
    """`psql` on one database: each call a process of its own, errors with their SQLSTATE."""

    url: str

    def argv(self) -> list[str]:
        return ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", self.url, "-f", "-"]

    def script(self, sql: str) -> str:
        return f"\\set VERBOSITY verbose\n{sql}\n"

    async def run(self, sql: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run, self.argv(), input=self.script(sql), capture_output=True,
            text=True, timeout=scaled(30),
        )  # fmt: skip

    async def ok(self, sql: str) -> list[str]:
        """The lines the script printed (one per value selected); it must succeed."""
        done = await self.run(sql)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    async def fails(self, sql: str) -> str:
        """The error the script stopped at (`ERROR:  SQLSTATE: message ...`)."""
        done = await self.run(sql)
        assert done.returncode != 0, done.stdout
        return done.stderr

    def start(self, sql: str) -> subprocess.Popen[str]:
        """The script in a process left running, its input open (`communicate` ends it and
        reads its output): psql runs each statement as it reads it."""
        proc = subprocess.Popen(
            self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(self.script(sql))
        proc.stdin.flush()
        return proc


@pytest.fixture
def psql(pg_url: str) -> Psql:
    if shutil.which("psql") is None:
        if os.environ.get("CI"):
            pytest.fail("psql is not installed (the PostgreSQL client)")
        pytest.skip("psql is not installed (the PostgreSQL client)")
    return Psql(pg_url)
