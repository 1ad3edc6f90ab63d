"""Sync workflows (a plain `def`) with real worker processes: kill -9 mid-step reruns only
that step, and a cancel reaches the step in flight (SPEC §4.2, §4.5, as for async ones)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from durably import SyncDurably
from tests.acceptance.conftest import Procs
from tests.apps import seed
from tests.helpers import duration, eventually_sync, scaled

SHORT_LEASE = ("--lease", duration(2), "--heartbeat", duration(0.5))


@pytest.fixture
def client(procs: Procs) -> Iterator[SyncDurably]:
    app = seed.app.rebind(procs.url)
    yield app.sync
    app.sync.close()


def _events(procs: Procs, run_id: str) -> list[tuple[str, str, str]]:
    return [(step, worker, event) for rid, step, worker, event, _ in
            seed.read_ledger(procs.url) if rid == run_id]  # fmt: skip


def _steps(client: SyncDurably, run_id: str) -> list[tuple[str, str, int]]:
    return [(s.step, s.status, s.attempt) for s in client.list_steps(run_id)]


def test_kill_9_mid_step_of_a_sync_workflow_reruns_only_that_step(
    procs: Procs, client: SyncDurably
) -> None:
    a = procs.worker("A", *SHORT_LEASE, COPY_SECONDS="60")
    run_id = client.start("acquire-sync", {"id": "s1"}).run_id
    client.send_signal("download-done:s1", {"ok": True})
    eventually_sync(lambda: ("copy-file", "A", "start") in _events(procs, run_id),
                    timeout=20, what="A to start copying")  # fmt: skip
    os.killpg(a.pid, signal.SIGKILL)
    a.wait()
    procs.worker("B", *SHORT_LEASE, COPY_SECONDS="0.1")
    run = client.wait(run_id, timeout=scaled(30))
    assert run.status == "completed", run.error
    assert run.output["signal"] == {"ok": True}
    assert run.output["sub"] == {"torrent_hash": "hash-s1"}
    assert _events(procs, run_id) == [
        ("submit-download", "A", "run"),  # completed before the kill: never run again
        ("copy-file", "A", "start"),
        ("copy-file", "B", "start"),
        ("copy-file", "B", "end"),
        ("cleanup", "B", "run"),
    ]
    assert _steps(client, run_id) == [
        ("submit-download", "completed", 1),
        ("download-done:s1", "completed", 1),
        ("copy-file", "abandoned", 1),
        ("copy-file", "completed", 2),
        ("register", "completed", 1),
        ("retention", "completed", 1),
        ("cleanup", "completed", 1),
    ]
    assert seed.read_library(procs.url) == [("s1", "/lib/s1.mkv", run_id)]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_cancel_reaches_the_running_step_of_a_sync_workflow(
    procs: Procs, client: SyncDurably, mode: str
) -> None:
    procs.worker("A")
    run_id = client.start("slow-sync", mode).run_id
    eventually_sync(lambda: ("long", "A", "start") in _events(procs, run_id),
                    timeout=20, what="the long step to start")  # fmt: skip
    assert procs.json("cancel", run_id)["status"] == "canceled"
    canceled_at = time.monotonic()
    if mode == "sync":
        eventually_sync(lambda: ("long", "A", "stopped") in _events(procs, run_id),
                        timeout=5, what="the sync body to see ctx.cancelled")  # fmt: skip
        assert time.monotonic() - canceled_at < scaled(1.0)  # SPEC §4.5: within 1 s
    eventually_sync(lambda: _steps(client, run_id) == [("long", "canceled", 1)], timeout=5,
                    what="the attempt to be recorded canceled")  # fmt: skip
    assert client.get_run(run_id).status == "canceled"
    # The worker carries on: a later run of the same workflow completes its steps.
    other = client.start("acquire-sync", {"id": "s2"}).run_id
    client.send_signal("download-done:s2", {"ok": True})
    assert client.wait(other, timeout=scaled(20)).status == "completed"
    assert ("after-long", "A", "run") not in _events(procs, run_id)
    assert ("long", "A", "end") not in _events(procs, run_id)
