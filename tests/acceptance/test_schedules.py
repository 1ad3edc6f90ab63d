"""Schedules (§4.17) across worker processes: one run per tick whatever the number of
workers, and the ticks missed while no worker ran started only with `backfill=True`."""

from __future__ import annotations

import itertools
import signal
import time
from datetime import datetime
from typing import Any

from tests.acceptance.conftest import Procs
from tests.apps import flow
from tests.helpers import eventually_sync, scaled

FLOW = {"DURABLY_APP": "tests.apps.flow:app", "FLOW_SCHEDULE": "1"}


def _ticks(client: Any, workflow: str) -> list[float]:
    """The ticks of the workflow's runs (Unix seconds), sorted, duplicates kept."""
    runs = client.list_runs(workflow=workflow, limit=10_000)
    return sorted(datetime.fromisoformat(r.input["scheduled_at"]).timestamp() for r in runs)


def test_three_workers_start_one_run_per_tick(procs: Procs) -> None:
    window = 10 if procs.url.startswith("postgres") else 5  # a shorter run on SQLite
    client = flow.app.rebind(procs.url).sync
    for name in "ABC":
        procs.worker(name, **FLOW)
    first = eventually_sync(lambda: _ticks(client, "every-second"), timeout=30,
                            what="the first scheduled run")[0]  # fmt: skip
    eventually_sync(lambda: _ticks(client, "every-second")[-1] >= first + window + 1,
                    timeout=window + 20, what=f"{window} more ticks")  # fmt: skip
    ticks = _ticks(client, "every-second")
    assert len(ticks) == len(set(ticks)), "a tick was started twice"
    inside = [t for t in ticks if first < t <= first + window]
    assert inside == [first + i for i in range(1, window + 1)]
    listed = procs.json("schedules", **FLOW)
    assert {s["workflow"] for s in listed} == {"every-second", "every-second-backfill"}
    assert all(s["schedule"] == "* * * * * *" and s["next_at"] for s in listed)
    client.close()


def test_backfill_starts_the_ticks_missed_while_no_worker_ran(procs: Procs) -> None:
    client = flow.app.rebind(procs.url).sync
    a = procs.worker("A", **FLOW)
    eventually_sync(lambda: len(_ticks(client, "every-second-backfill")) >= 2, timeout=30,
                    what="two scheduled runs")  # fmt: skip
    a.send_signal(signal.SIGTERM)
    assert a.wait(timeout=scaled(15)) == 0
    last = _ticks(client, "every-second-backfill")[-1]
    # No worker runs for at least five ticks.
    eventually_sync(lambda: time.time() > last + 5.5, timeout=10, what="five ticks to pass")
    procs.worker("B", **FLOW)
    back = eventually_sync(lambda: [t for t in _ticks(client, "every-second") if t > last + 5],
                           timeout=30, what="the worker to be back")[0]  # fmt: skip
    eventually_sync(lambda: _ticks(client, "every-second-backfill")[-1] >= back, timeout=10,
                    what="the backfilled workflow to catch up")  # fmt: skip
    backfilled = _ticks(client, "every-second-backfill")
    assert len(backfilled) == len(set(backfilled))
    assert backfilled == [backfilled[0] + i for i in range(len(backfilled))], "a tick is missing"
    skipped = _ticks(client, "every-second")
    gaps = [b - a for a, b in itertools.pairwise(skipped)]
    assert max(gaps) >= 5, skipped  # without backfill, the missed ticks stay missed
    client.close()
