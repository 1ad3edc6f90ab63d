"""A Ctrl-C (a real SIGINT) to a program that embeds a worker stops that program as its
own SIGINT handling says (asyncio's runner, or Python's default KeyboardInterrupt), even
when it arrives while user code runs on the main thread: the KeyboardInterrupt a signal
raises is never user code's, so it is never recorded as a step's or a run's failure
(SPEC §4.20: only a KeyboardInterrupt *raised by* user code is; tests/acceptance/
test_base_exceptions.py). Another worker then completes the run."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from durably import SyncDurably
from tests.acceptance.conftest import ROOT, Procs
from tests.apps import embedded
from tests.helpers import eventually_sync, scaled, tail

APP = "tests.apps.embedded:app"


# `loop`: Python's default handler raises KeyboardInterrupt at once. (`asyncio.run`, whose
# first Ctrl-C cancels the main task and second raises KeyboardInterrupt, is not here yet:
# on PostgreSQL its first Ctrl-C sometimes started no drain, and its exit could wait on the
# app it never closed.)
@pytest.mark.parametrize(("mode", "workflow"), [("loop", "spin-body"), ("loop", "spin-flow")])
def test_a_ctrl_c_to_an_embedded_worker_is_never_a_failure_of_user_code(
    procs: Procs, tmp_path: Path, mode: str, workflow: str
) -> None:
    mark, release = tmp_path / "spinning", tmp_path / "release"
    env = procs.env(DURABLY_APP=APP, SPIN_MARK=str(mark), SPIN_RELEASE=str(release))
    client: SyncDurably = embedded.app.rebind(procs.url).sync
    try:
        run_id = client.start(workflow).run_id
        log = tmp_path / "embedded.log"
        proc = procs.processes.start([sys.executable, "-m", "tests.apps.embedded", mode],
                                     log, env=env, cwd=ROOT)  # fmt: skip
        eventually_sync(mark.exists, timeout=30, what="user code to spin")
        os.kill(proc.pid, signal.SIGINT)
        if mode == "asyncio.run":
            eventually_sync(lambda: "draining 1 runs" in log.read_text(), timeout=30,
                            what="the first Ctrl-C to start a drain")  # fmt: skip
            os.kill(proc.pid, signal.SIGINT)
        release.touch()
        eventually_sync(lambda: proc.poll() is not None, timeout=30,
                        what=f"the program to stop\n{tail(log)}")  # fmt: skip
        assert "KeyboardInterrupt" in log.read_text(), tail(log)  # it stopped on Ctrl-C
        run = client.get_run(run_id)
        assert run.status != "failed", (run.error, tail(log))
        steps = [(s.step, s.status, (s.error or {}).get("type")) for s in client.list_steps(run_id)]
        assert all(status != "failed" for _, status, _ in steps), (steps, tail(log))

        procs.worker("B", "--lease", "2s", DURABLY_APP=APP, SPIN_MARK=str(mark),
                     SPIN_RELEASE=str(release))  # fmt: skip
        done = client.wait(run_id, timeout=scaled(30))
        assert (done.status, done.output, done.attempts) == ("completed", "spun", 1), done.error
    finally:
        client.close()
