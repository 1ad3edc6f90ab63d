"""The seed record's cases (a)-(i), reproduced with real worker processes.

Each test names the seed case it covers. Workers are `durably worker` subprocesses on
`tests.apps.seed`, which writes every step body's side effect to a business ledger.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from durably import SyncDurably
from tests.acceptance.conftest import Procs
from tests.apps import seed
from tests.helpers import duration, eventually_sync, freeze_outside_a_write, let_go, scaled

SHORT_LEASE = ("--lease", duration(2), "--heartbeat", duration(0.5))
SHORTER_LEASE = ("--lease", duration(1), "--heartbeat", duration(0.3))


@pytest.fixture
def client(procs: Procs) -> Iterator[SyncDurably]:
    app = seed.app.rebind(procs.url)
    yield app.sync
    app.sync.close()


def steps_of(client: SyncDurably, run_id: str) -> list[tuple[str, str, int]]:
    return [(s.step, s.status, s.attempt) for s in client.list_steps(run_id)]


def test_a_tables_and_idempotent_migrations(procs: Procs) -> None:
    assert "already up to date" in procs.cli("migrate").stdout
    tables = procs.json("tables")
    assert {t.rsplit(".", 1)[-1].removeprefix("durably_") for t in tables} >= {
        "runs", "step_attempts", "signals", "migrations"}  # fmt: skip
    assert seed.read_ledger(procs.url) == []  # the business tables sit beside them


def test_main_path(procs: Procs, client: SyncDurably) -> None:
    procs.worker("A")
    started = procs.json("start", "acquire", "--input", '{"id": "d1"}')
    assert started["status"] == "pending" and started["version"] == "v1"
    run_id = started["run_id"]
    eventually_sync(lambda: client.get_run(run_id).status == "waiting", what="the wait")
    sent = procs.json("signal", "download-done:d1", "--data", '{"ok": true}')
    assert sent == {"delivered_to": [run_id], "buffered": False, "duplicate": False}
    run = client.wait(run_id, timeout=scaled(20))
    assert run.status == "completed" and run.output["signal"] == {"ok": True}
    shown = procs.json("show", run_id)
    assert [(s["step"], s["kind"], s["status"]) for s in shown["steps"]] == [
        ("submit-download", "function", "completed"),
        ("download-done:d1", "signal-wait", "completed"),
        ("copy-file", "function", "completed"),
        ("register", "transaction", "completed"),
        ("retention", "sleep", "completed"),
        ("cleanup", "function", "completed"),
    ]
    assert seed.read_library(procs.url) == [("d1", "/lib/d1.mkv", run_id)]


def test_b_kill_9_mid_step_reruns_only_that_step(procs: Procs, client: SyncDurably) -> None:
    a = procs.worker("A", *SHORT_LEASE, COPY_SECONDS="60")
    run_id = client.start("acquire", {"id": "d2"}).run_id
    client.send_signal("download-done:d2", {"ok": True})
    eventually_sync(lambda: ("copy-file", "A", "start") in _events(procs, run_id),
                    timeout=20, what="A to start copying")  # fmt: skip
    os.killpg(a.pid, signal.SIGKILL)
    a.wait()
    procs.worker("B", *SHORT_LEASE, COPY_SECONDS="0.1")
    run = client.wait(run_id, timeout=scaled(30))
    assert run.status == "completed"
    assert _events(procs, run_id) == [
        ("submit-download", "A", "run"),
        ("copy-file", "A", "start"),
        ("copy-file", "B", "start"),
        ("copy-file", "B", "end"),
        ("cleanup", "B", "run"),
    ]
    copies = [(st, att) for step, st, att in steps_of(client, run_id) if step == "copy-file"]
    assert copies == [("abandoned", 1), ("completed", 2)]
    assert len(seed.read_library(procs.url)) == 1


def test_b_frozen_worker_cannot_commit_after_takeover(procs: Procs, client: SyncDurably) -> None:
    # The copy lasts long enough for the test to freeze A in it (a window is a deadline).
    a = procs.worker("A", *SHORTER_LEASE, COPY_SECONDS=str(scaled(2)))
    run_id = client.start("acquire", {"id": "d3"}).run_id
    client.send_signal("download-done:d3", {"ok": True})
    eventually_sync(lambda: ("copy-file", "A", "start") in _events(procs, run_id),
                    timeout=20, what="A to start copying")  # fmt: skip
    freeze_outside_a_write(a, procs.url)
    procs.worker("B", *SHORTER_LEASE, COPY_SECONDS="0.1")
    assert client.wait(run_id, timeout=scaled(30)).status == "completed"
    os.killpg(a.pid, signal.SIGCONT)
    # A wakes, finds its lease gone and stops; give it the time to try anything it would.
    eventually_sync(lambda: let_go(procs.log("A"), run_id), timeout=15, what="A to notice")
    assert seed.read_library(procs.url) == [("d3", "/lib/d3.mkv", run_id)]
    events = _events(procs, run_id)
    assert ("register", "A") not in {(s, w) for s, w, _ in events}
    assert next(e for e in events if e[1] == "B") == ("copy-file", "B", "start")
    run = client.get_run(run_id)
    assert run.status == "completed" and run.worker_id is None


def _events(procs: Procs, run_id: str) -> list[tuple[str, str, str]]:
    return [(step, worker, event) for rid, step, worker, event, _ in
            seed.read_ledger(procs.url) if rid == run_id]  # fmt: skip


def test_c_signals_are_durable(procs: Procs, client: SyncDurably) -> None:
    procs.worker("A")
    early = procs.json("signal", "download-done:d4", "--data", '{"n": 1}',
                       "--idempotency-key", "early-key")  # fmt: skip
    assert early == {"delivered_to": [], "buffered": True, "duplicate": False}
    again = procs.json("signal", "download-done:d4", "--data", '{"n": 1}',
                       "--idempotency-key", "early-key")  # fmt: skip
    assert again == {"delivered_to": [], "buffered": True, "duplicate": True}
    run_id = procs.json("start", "acquire", "--input", '{"id": "d4"}')["run_id"]
    run = client.wait(run_id, timeout=scaled(20))
    assert run.status == "completed" and run.output["signal"] == {"n": 1}
    late = procs.json("signal", "download-done:d4", "--data", '{"n": 2}')
    assert late == {"delivered_to": [], "buffered": True, "duplicate": False}


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_d_cancel_reaches_the_running_step(procs: Procs, client: SyncDurably, mode: str) -> None:
    procs.worker("A")
    run_id = client.start("slow", mode).run_id
    eventually_sync(lambda: ("long", "A", "start") in _events(procs, run_id),
                    timeout=20, what="the long step to start")  # fmt: skip
    assert procs.json("cancel", run_id)["status"] == "canceled"
    canceled_at = time.monotonic()  # committed: the CLI's own start-up is not the worker's
    if mode == "sync":
        eventually_sync(lambda: ("long", "A", "stopped") in _events(procs, run_id),
                        timeout=5, what="the sync body to see ctx.cancelled")  # fmt: skip
        assert time.monotonic() - canceled_at < scaled(1.0)  # SPEC §4.5: within 1 s
    assert steps_of(client, run_id) == [("long", "canceled", 1)]
    refused = procs.cli("signal", "x", "--run", run_id, check=False)
    assert refused.returncode != 0 and "canceled" in refused.stderr
    again = procs.cli("cancel", run_id, check=False)
    assert again.returncode == 1 and "already canceled" in again.stderr
    assert ("after-long", "A", "run") not in _events(procs, run_id)
    assert ("long", "A", "end") not in _events(procs, run_id)


def test_e_retries_and_their_limit(procs: Procs, client: SyncDurably) -> None:
    procs.worker("A")
    ok = client.start("flaky", 2).run_id
    bad = client.start("flaky", 5).run_id
    assert client.wait(ok, timeout=scaled(20)).status == "completed"
    failed = client.wait(bad, timeout=scaled(20))
    assert failed.status == "failed" and failed.error is not None
    assert "boom attempt 3" in failed.error["message"]
    assert [s for _, s, _ in steps_of(client, ok)] == ["failed", "failed", "completed"]
    assert [s for _, s, _ in steps_of(client, bad)] == ["failed", "failed", "failed"]
    assert failed.attempts == 1  # step retries do not spend the workflow's attempts


def test_f_idempotency_key(procs: Procs) -> None:
    args = ("start", "acquire", "--idempotency-key", "same-key", "--input")
    first = procs.json(*args, '{"id": "d5"}')
    assert procs.json(*args, '{"id": "d5"}')["run_id"] == first["run_id"]
    conflict = procs.cli(*args, '{"id": "d5-other"}', check=False)
    assert conflict.returncode == 2 and "different input" in conflict.stderr
    with ThreadPoolExecutor(8) as pool:
        ids = set(
            pool.map(
                lambda _: procs.json(
                    "start", "acquire", "--idempotency-key", "burst", "--input", '{"id": "c"}'
                )["run_id"],
                range(8),
            )
        )
    assert len(ids) == 1


def test_g_unknown_version_is_left_untouched(procs: Procs, client: SyncDurably) -> None:
    procs.worker("V2", WF_VERSION="v2")
    run_id = client.start("acquire", {"id": "d6"}).run_id
    stuck = procs.json("runs", "--stuck")
    assert [r["run_id"] for r in stuck] == [run_id]
    run = client.get_run(run_id)
    assert (run.status, run.attempts, run.fence, run.error) == ("pending", 0, 0, None)


def test_g_renamed_step_is_held_until_the_fix(procs: Procs, client: SyncDurably) -> None:
    """A deploy that renames a recorded step holds the run (SPEC §4.2): not failed, nothing
    undone, listed as stuck; the fix's deploy goes on from its history."""
    a = procs.worker("A", NAP=duration(1))  # long enough to stop A while the run naps
    run_id = client.start("renamed").run_id
    eventually_sync(lambda: client.get_run(run_id).status == "waiting", what="the nap")
    a.send_signal(signal.SIGTERM)
    a.wait(timeout=scaled(15))
    before = client.get_run(run_id)
    b = procs.worker("B", RENAMED="1")
    eventually_sync(lambda: client.get_run(run_id).status == "held", what="the run held")
    run = client.get_run(run_id)
    assert run.error is not None and run.error["type"] == "NonDeterminismError"
    assert "position 1" in run.error["message"] and "'first'" in run.error["message"]
    assert (run.attempts, run.finished_at) == (before.attempts, None)
    assert [r["run_id"] for r in procs.json("runs", "--stuck")] == [run_id]
    assert [r["run_id"] for r in procs.json("runs", "--status", "held")] == [run_id]
    b.send_signal(signal.SIGTERM)
    b.wait(timeout=scaled(15))
    procs.worker("C")  # the fix: the code the run began with
    run = client.wait(run_id, timeout=scaled(20))
    assert (run.status, run.output, run.attempts) == ("completed", "done", before.attempts)
    assert _events(procs, run_id) == [("first", "A", "run"), ("second", "C", "run")]


def test_i_two_workers_no_duplicate_execution(procs: Procs, client: SyncDurably) -> None:
    procs.worker("A", "--concurrency", "8")
    procs.worker("B", "--concurrency", "8")
    run_ids = [client.start("burst", i).run_id for i in range(150)]
    eventually_sync(lambda: len(client.list_runs(status="completed", limit=1000)) == 150,
                    timeout=90, what="all runs to complete")  # fmt: skip
    counts = Counter((rid, step) for rid, step, *_ in seed.read_ledger(procs.url))
    assert len(counts) == 150 * 3 and set(counts.values()) == {1}
    by_worker = Counter(worker for _, _, worker, *_ in seed.read_ledger(procs.url))
    assert set(by_worker) == {"A", "B"}
    assert set(run_ids) == {rid for rid, _ in counts}
