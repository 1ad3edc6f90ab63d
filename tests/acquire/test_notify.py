"""`acquire notify`, qBittorrent's finish hook. qBittorrent runs it once and looks no
further, so the hook itself must see its signal through a short database outage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.acquire.conftest import Acquire
from tests.faults import FaultProxy
from tests.helpers import eventually_sync, run_command, scaled
from tests.processes import Processes


def test_notify_sends_its_signal_through_a_database_outage(
    pg_url: str, fault_proxy: FaultProxy, tmp_path: Path, processes: Processes
) -> None:
    acq = Acquire(fault_proxy.url_for(pg_url), tmp_path, processes)
    fault_proxy.refuse()
    hook = subprocess.Popen(
        [sys.executable, "-m", "acquire.cli", "notify", "abc123", "--id", "q9"],
        env=acq.env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        eventually_sync(lambda: fault_proxy.refused > 0 or hook.poll() is not None,
                        timeout=30, what="the hook to try the database")  # fmt: skip
        fault_proxy.refuse(False)
        out, err = hook.communicate(timeout=scaled(60))
    finally:
        if hook.poll() is None:
            hook.kill()
    assert hook.returncode == 0, err
    assert json.loads(out)["buffered"] is True
    listed = run_command("durably.cli", ("signals", "--json"), acq.env(), tmp_path, True)
    stored = [s for s in json.loads(listed.stdout) if s["name"] == "download-done:q9"]
    assert [s["data"]["hash"] for s in stored] == ["abc123"]
