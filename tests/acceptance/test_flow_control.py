"""Queues (§4.17) across worker processes: the database enforces every limit, whichever
worker claims; a full key blocks no other key; priorities order the claims."""

from __future__ import annotations

import os
import signal
from datetime import datetime
from typing import Any

import pytest

from durably import Run
from tests.acceptance.conftest import Procs
from tests.apps import flow, moved
from tests.helpers import duration, eventually_sync

FLOW = "tests.apps.flow:app"
MOVED = "tests.apps.moved:app"


def _done(client: Any, workflow: str, n: int) -> list[Run]:
    runs: list[Run] = client.list_runs(workflow=workflow, limit=1000)
    return runs if len(runs) == n and all(r.status == "completed" for r in runs) else []


def test_four_workers_never_exceed_a_limit_of_three(procs: Procs) -> None:
    client = flow.app.rebind(procs.url).sync
    for k in range(12):
        client.start("limited", k)
    for name in "ABCD":
        procs.worker(name, "--concurrency", "4", DURABLY_APP=FLOW, FLOW_HOLD="0.4")
    runs = eventually_sync(lambda: _done(client, "limited", 12), timeout=60,
                           what="the 12 runs of the queue")  # fmt: skip
    ids = {r.run_id for r in runs}
    assert flow.peak(flow.ledger_events(procs.url), ids) == 3
    client.close()


def _started(runs: list[Run]) -> list[datetime]:
    return sorted(r.started_at for r in runs if r.started_at is not None)


def test_per_key_rate_and_priority(procs: Procs) -> None:
    client = flow.app.rebind(procs.url).sync
    keyed = {client.start("keyed", k, concurrency_key=key).run_id: key
             for k, key in enumerate(["a", "a", "a", "b", "c"])}  # fmt: skip
    for k in range(6):
        client.start("rated", k)
    priorities = [0, 5, 1, 5, 0, 9]
    for k, prio in enumerate(priorities):
        client.start("ranked", k, priority=prio)
    for name in "AB":
        procs.worker(name, DURABLY_APP=FLOW, FLOW_HOLD="0.3")
    for workflow, n in (("keyed", 5), ("rated", 6), ("ranked", 6)):
        eventually_sync(lambda w=workflow, n=n: _done(client, w, n), timeout=60,  # type: ignore[misc]
                        what=f"the runs of {workflow}")  # fmt: skip
    events = flow.ledger_events(procs.url)
    # per_key=1: one run of a key at a time, and the other keys ran beside key "a".
    for key in "abc":
        assert flow.peak(events, {rid for rid, k in keyed.items() if k == key}) == 1
    assert flow.peak(events, set(keyed)) >= 2
    # rate 2/1s: no more than two first claims in any window of one second.
    starts = _started(client.list_runs(workflow="rated"))
    for at in starts:
        assert sum(1 for s in starts if 0 <= (at - s).total_seconds() < 1) <= 2, starts
    # priority: larger first, then in the order they were started.
    ranked = {r.run_id: r.input for r in client.list_runs(workflow="ranked")}
    order = [ranked[rid] for rid, _, event, _ in events if rid in ranked and event == "start"]
    assert order == [5, 1, 3, 2, 0, 4]
    listed = procs.json("runs", "--queue", "ranked")
    assert sorted(r["input"] for r in listed) == list(range(6))
    client.close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the CLI, not the database
def test_cli_queue_options(procs: Procs) -> None:
    env = {"DURABLY_APP": FLOW}
    started = procs.json("start", "ranked", "--input", "7", "--priority", "3", **env)
    assert started["status"] == "pending"
    procs.json("start", "keyed", "--input", "1", "--concurrency-key", "tracker-a", **env)
    refused = procs.cli("start", "limited", "--input", "1", "--priority", "3", check=False,
                        **env)  # fmt: skip
    assert refused.returncode == 2 and "priority=True" in refused.stderr
    listed = procs.json("runs", "--queue", "ranked", **env)
    assert [(r["run_id"], r["priority"], r["queue"]) for r in listed] == [
        (started["run_id"], 3, "ranked")
    ]
    keyed = procs.json("runs", "--queue", "keyed", **env)
    assert [r["concurrency_key"] for r in keyed] == ["tracker-a"]


@pytest.mark.parametrize("renamed_to", ["fetches", ""])
def test_a_queue_renamed_or_removed_in_a_deploy_strands_no_run(
    procs: Procs, renamed_to: str
) -> None:
    """The old deploy's worker dies holding a run of queue "downloads"; the new deploy
    renames the queue (or removes it). Every run still completes: the held one once its
    lease ends, the pending ones once "downloads" is no longer declared."""
    env = {"DURABLY_APP": MOVED, "MOVED_HOLD": "30"}
    client = moved.app.rebind(procs.url).sync
    ids = [client.start("moved", k).run_id for k in range(3)]
    old = procs.worker("old", "--lease", duration(1), "--heartbeat", duration(0.3), **env)
    eventually_sync(lambda: any(e[2] == "start" for e in flow.ledger_events(procs.url)),
                    timeout=30, what="the old worker to hold a run")  # fmt: skip
    os.kill(old.pid, signal.SIGKILL)
    old.wait()
    procs.worker("new", "--lease", duration(1), "--heartbeat", duration(0.3), "--poll",
                 duration(0.3), **dict(env, MOVED_QUEUE=renamed_to, MOVED_HOLD="0.1"))  # fmt: skip
    runs = eventually_sync(lambda: _done(client, "moved", 3), timeout=60,
                           what="every run of the renamed queue")  # fmt: skip
    assert {r.run_id for r in runs} == set(ids)
    assert {r.queue for r in runs} == {"downloads"}  # a run's queue never changes
    assert "unexpected" not in procs.log("new")
    client.close()
