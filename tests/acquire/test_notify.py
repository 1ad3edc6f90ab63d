"""`acquire notify`, qBittorrent's finish hook. qBittorrent runs it once and looks no
further, so the hook itself must see its signal through a short database outage."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.acquire.conftest import Acquire
from tests.faults import FaultProxy
from tests.helpers import eventually_sync, run_command, scaled
from tests.processes import Processes


def _hook(acq: Acquire) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*acq.cli_argv(), "notify", "abc123", "--id", "q9"],
        env=acq.env(), cwd=acq.work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _ended(hook: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return hook.communicate(timeout=scaled(60))
    finally:
        if hook.poll() is None:
            hook.kill()


def _stored(acq: Acquire) -> list[str]:
    """The hashes of the signals stored for order q9."""
    listed = run_command("durably.cli", ("signals", "--all", "--json"), acq.env(), acq.work,
                         True)  # fmt: skip
    return [s["data"]["hash"] for s in json.loads(listed.stdout)
            if s["name"] == "download-done:q9"]  # fmt: skip


def test_notify_sends_its_signal_through_a_database_outage(
    pg_url: str, fault_proxy: FaultProxy, tmp_path: Path, processes: Processes
) -> None:
    acq = Acquire(fault_proxy.url_for(pg_url), tmp_path, processes)
    fault_proxy.refuse()
    hook = _hook(acq)
    eventually_sync(lambda: fault_proxy.refused > 0 or hook.poll() is not None,
                    timeout=30, what="the hook to try the database")  # fmt: skip
    fault_proxy.refuse(False)
    out, err = _ended(hook)
    assert hook.returncode == 0, err
    assert json.loads(out)["buffered"] is True
    assert _stored(acq) == ["abc123"]


def test_notify_whose_commit_reply_is_lost_sends_once(
    pg_url: str, fault_proxy: FaultProxy, tmp_path: Path, processes: Processes
) -> None:
    """The send committed, its reply was lost: the hook tries again, and its key finds the
    signal sent (`duplicate`) instead of storing a second."""
    Acquire(pg_url, tmp_path, processes).cli("status")  # the schema, made beside the proxy
    acq = Acquire(fault_proxy.url_for(pg_url), tmp_path, processes)
    fault_proxy.cut_after_commit(1)
    out, err = _ended(_hook(acq))
    assert fault_proxy.commits_cut == 1
    assert json.loads(out)["duplicate"] is True, err
    assert _stored(acq) == ["abc123"]
