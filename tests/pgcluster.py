"""A throwaway PostgreSQL cluster of a test's own: initdb + pg_ctl on a free port.

Run as the `postgres` user when the tests run as root (root may not run the server).
Used when no server is reachable, and by the tests that restart PostgreSQL for real.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import scaled


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def available() -> bool:
    return find_binary("initdb") is not None and find_binary("pg_ctl") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A PostgreSQL cluster in a temporary directory, trust auth, on 127.0.0.1."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="durably-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(
            cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.root
        )

    def init(self) -> Cluster:
        self._run(
            find_binary("initdb") or "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        return self

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.root} -c fsync=off -c max_connections=200"
        )
        self._run(
            find_binary("pg_ctl") or "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            opts,
            "-w",
            "-t",
            str(round(scaled(60))),
            "start",
        )

    def standby(self) -> Cluster:
        """A streaming replica of this (running) cluster, made by `pg_basebackup -R`, on a
        port of its own; not started yet."""
        standby = Cluster()
        self._run(
            find_binary("pg_basebackup") or "pg_basebackup", "-h", "127.0.0.1",
            "-p", str(self.port), "-U", "postgres", "-D", str(standby.data), "-R",
            "-X", "stream", "--no-sync",
        )  # fmt: skip
        return standby

    def stop(self, mode: str = "fast") -> None:
        self._run(find_binary("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
