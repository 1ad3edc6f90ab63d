"""Per-key strategies (§4.23) across four worker processes and starts from several
threads at once: with `cancel_running` a burst on one key ends with only its newest run
completed, every other canceled and undone exactly once if it had reserved; with
`cancel_new` only the first start of the key runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from durably import Run
from tests.acceptance.conftest import Procs
from tests.apps import flow
from tests.helpers import duration, eventually_sync, scaled

FLOW = "tests.apps.flow:app"
SHORT = ("--lease", duration(2), "--heartbeat", duration(0.3), "--concurrency", "4")


def _ended(client: Any, workflow: str, n: int) -> list[Run]:
    runs: list[Run] = client.list_runs(workflow=workflow, limit=1000)
    done = len(runs) == n and all(r.finished_at is not None for r in runs)
    return runs if done else []


def _burst(client: Any, workflow: str, key: str, inputs: list[int]) -> list[str]:
    """Start `inputs` on `key` from 4 threads at once (the client's pool serves them
    side by side: starts in transactions of their own, at once)."""

    def start(part: list[int]) -> list[str]:
        return [client.start(workflow, k, concurrency_key=key).run_id for k in part]

    with ThreadPoolExecutor(4) as pool:
        parts = [inputs[i::4] for i in range(4)]
        return [rid for ids in pool.map(start, parts) for rid in ids]


def _reserved(procs: Procs, run_id: str) -> bool:
    return any(e[0] == run_id and e[2] == "reserve" for e in flow.ledger_events(procs.url))


@pytest.fixture
def client(procs: Procs) -> Iterator[Any]:
    client = flow.app.rebind(procs.url).sync
    yield client
    client.close()


def test_cancel_running_leaves_only_the_newest_run(procs: Procs, client: Any) -> None:
    for name in "ABCD":
        procs.worker(name, *SHORT, DURABLY_APP=FLOW, FLOW_HOLD=f"{scaled(3):g}")
    first = client.start("latest", 0, concurrency_key="q").run_id
    eventually_sync(lambda: _reserved(procs, first), timeout=30, what="the first run to run")
    burst = _burst(client, "latest", "q", list(range(1, 13)))
    newest = client.start("latest", 99, concurrency_key="q").run_id
    runs = eventually_sync(lambda: _ended(client, "latest", 14), timeout=90,
                           what="every run of the key to end")  # fmt: skip
    status = {r.run_id: r.status for r in runs}
    assert status.pop(newest) == "completed"
    assert set(status.values()) == {"canceled"} and set(status) == {first, *burst}
    for run in runs:
        if run.run_id != newest:
            assert run.error is not None and "superseded by run" in run.error["message"]
    events = flow.ledger_events(procs.url)
    reserved = Counter(e[0] for e in events if e[2] == "reserve")
    undone = Counter(e[0] for e in events if e[2] == "undo")
    assert first in reserved and newest in reserved
    assert undone == Counter({rid: 1 for rid in reserved if rid != newest})
    assert max(reserved.values()) == 1  # no run reserved twice
    assert [e[0] for e in events if e[2] == "end"] == [newest]  # no other body finished


def test_cancel_new_runs_only_the_first_start(procs: Procs, client: Any) -> None:
    for name in "ABCD":
        procs.worker(name, *SHORT, DURABLY_APP=FLOW, FLOW_HOLD="1")
    ids = _burst(client, "single", "s", list(range(12)))
    runs = eventually_sync(lambda: _ended(client, "single", 12), timeout=60,
                           what="every run of the key to end")  # fmt: skip
    [winner] = [r for r in runs if r.status == "completed"]
    canceled = [r for r in runs if r.status == "canceled"]
    assert len(canceled) == 11 and {r.run_id for r in runs} == set(ids)
    for run in canceled:
        assert run.error is not None and "on_full='cancel_new'" in run.error["message"]
        assert run.started_at is None  # canceled at its start: no worker ever claimed it
    events = flow.ledger_events(procs.url)
    assert {e[0] for e in events} == {winner.run_id}
    assert "undo" not in {e[2] for e in events}
    # Once the key is free again, a start runs.
    again = client.start("single", 50, concurrency_key="s").run_id
    eventually_sync(lambda: client.get_run(again).status == "completed", timeout=30,
                    what="a start once the key is free")  # fmt: skip
