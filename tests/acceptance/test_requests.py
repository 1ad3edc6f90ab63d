"""Requests (SPEC §4.22) through real processes: a worker killed (`kill -9`) between taking
a request and replying; the next worker replies, the client gets exactly one answer and
the run's history one reply. `durably request` prints the answer, or exits 1 with the
reason of a rejection."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.acceptance.conftest import Procs
from tests.apps import requests
from tests.helpers import duration, eventually_sync, scaled

APP = "tests.apps.requests:app"
SHORT_LEASE = ("--lease", duration(2), "--heartbeat", duration(0.5))


def test_kill_9_between_taking_a_request_and_replying_answers_once(
    procs: Procs, tmp_path: Path
) -> None:
    entered, hold = tmp_path / "entered", tmp_path / "hold"
    hold.touch()
    files = {"DURABLY_APP": APP, "ENTERED_FILE": str(entered), "HOLD_FILE": str(hold)}
    client = requests.app.rebind(procs.url).sync
    try:
        a = procs.worker("A", *SHORT_LEASE, **files)
        run_id = client.start("answer-once").run_id
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(client.request, run_id, "ask", 21, timeout=scaled(60))
            eventually_sync(lambda: entered.exists() and entered.read_text(), timeout=20,
                            what="A inside the step after the wait")  # fmt: skip
            os.killpg(a.pid, signal.SIGKILL)
            a.wait()
            hold.unlink()
            procs.worker("B", *SHORT_LEASE, **files)
            assert asked.result() == {"doubled": 42}
        eventually_sync(lambda: client.get_run(run_id).status == "waiting", timeout=20,
                        what="the run parked after its reply")  # fmt: skip
        client.send_signal(f"end:{run_id}")
        assert client.result(run_id, timeout=scaled(30)) == "done"
        steps = client.list_steps(run_id)
    finally:
        client.close()
    assert len(entered.read_text().split()) == 2  # the step began under A, then B
    replies = [(s.step, s.kind, s.status) for s in steps if s.kind == "reply"]
    assert replies == [("reply:ask", "reply", "completed")]
    waits = [s for s in steps if s.step == "request:ask"]
    assert [w.status for w in waits] == ["completed"]  # taken once, replayed by B


def test_the_cli_prints_the_answer_or_exits_1_with_the_reason(procs: Procs) -> None:
    client = requests.app.rebind(procs.url).sync
    try:
        procs.worker("A", DURABLY_APP=APP)
        yes, no = client.start("answer-once").run_id, client.start("answer-once").run_id
        out = procs.cli("request", yes, "ask", "--data", "4", "--timeout", duration(30),
                        "--json", DURABLY_APP=APP)  # fmt: skip
        assert json.loads(out.stdout) == {"doubled": 8}
        refused = procs.cli("request", no, "ask", "--data", '"no"', check=False, DURABLY_APP=APP)
        assert refused.returncode == 1, refused
        assert "rejected: not today" in refused.stderr
        missing = procs.cli("request", "no-such-run", "ask", check=False, DURABLY_APP=APP)
        assert missing.returncode == 2 and "no run" in missing.stderr, missing  # as `show`
    finally:
        client.close()
