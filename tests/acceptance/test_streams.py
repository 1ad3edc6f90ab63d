"""Streams (§4.21) through real processes: `durably stream` follows a run's stream while
the worker writing it is killed (SIGKILL) and another finishes it; it prints each value
once, in order, and exits 0 at the close."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from durably import Durably
from tests.acceptance.conftest import ROOT, Procs
from tests.apps import streams
from tests.helpers import duration, eventually_sync, scaled

APP = "tests.apps.streams:app"


def test_a_follower_sees_each_value_once_through_a_kill(procs: Procs, tmp_path: Path) -> None:
    env = procs.env(DURABLY_APP=APP)
    client = streams.app.rebind(procs.url).sync
    run_id = client.start("streamer", {"count": 20, "kill_at": 7}).run_id
    follower = subprocess.Popen(
        [sys.executable, "-m", "durably.cli", "stream", run_id, "tokens", "--json"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        marker = tmp_path / "killed"
        lease = ("--lease", duration(1), "--heartbeat", duration(0.3))
        a = procs.worker("A", *lease, DURABLY_APP=APP, KILL_MARKER=str(marker))
        eventually_sync(lambda: a.poll() is not None, timeout=30, what="A to be killed")
        assert marker.exists() and a.returncode == -9
        procs.worker("B", *lease, DURABLY_APP=APP, KILL_MARKER=str(marker))
        assert client.wait(run_id, timeout=scaled(30)).status == "completed"
        out, err = follower.communicate(timeout=scaled(30))
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [{"i": i} for i in range(20)]
    written = [s for s in client.list_steps(run_id) if s.kind == "stream" and s.step == "tokens"]
    assert len(written) == 20  # the replay after the kill wrote nothing again
    assert client.list_streams(run_id) == [{"key": "tokens", "length": 20, "closed": True}]
    again = procs.cli("stream", run_id[:8], "tokens", "--from", "18", DURABLY_APP=APP)
    assert again.stdout.splitlines() == ['{"i": 18}', '{"i": 19}']
    client.close()


def test_stream_cli_errors_exit_2(procs: Procs) -> None:
    missing = procs.cli("stream", "no-such-run", "tokens", check=False)
    assert missing.returncode == 2 and "no run" in missing.stderr
    bad = procs.cli("stream", "no-such-run", "tokens", "--from", "-1", check=False)
    assert bad.returncode == 2


def test_a_bare_reader_app_reads_a_finished_stream(procs: Procs) -> None:
    client = streams.app.rebind(procs.url).sync
    run_id = client.start("streamer", {"count": 3}).run_id
    w = procs.worker("W", DURABLY_APP=APP)
    assert client.wait(run_id, timeout=scaled(30)).status == "completed"
    w.terminate()
    bare = Durably(procs.url)  # no workflows registered: a reader needs none
    assert list(bare.sync.read_stream(run_id, "tokens")) == [{"i": i} for i in range(3)]
    bare.sync.close()
    client.close()
