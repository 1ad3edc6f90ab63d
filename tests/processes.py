"""The processes a test starts, owned by one fixture (`processes` in tests/conftest.py)
that stops them and waits for each when the test ends, whether it passed or not."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import scaled


class Processes:
    """Starts processes, each in a session of its own, and stops them all at the end.

    Register a process before waiting for anything from it: a test that fails while it
    starts must still leave nothing running (a `Popen` collected while its process runs
    warns, and `filterwarnings = error` fails whichever test is running at that moment).
    """

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], log: Path, **popen: Any) -> subprocess.Popen[bytes]:
        """Run `cmd` with its output appended to `log`; `popen` goes to `subprocess.Popen`."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    **popen)  # fmt: skip
        self._procs.append(proc)
        return proc

    def stop_all(self, grace: float = 15) -> None:
        """SIGTERM each (after SIGCONT, in case a test froze it), wait for it; SIGKILL
        the stubborn after `scaled(grace)` seconds. Every process is waited for."""
        procs, self._procs = self._procs, []
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    os.killpg(proc.pid, signal.SIGCONT)
                    proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=scaled(grace))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
