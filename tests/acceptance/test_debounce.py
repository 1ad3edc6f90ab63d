"""Debounce across processes (SPEC §4.23, issue 29): three starter processes start one
workflow with one debounce key, many times and at once; the database makes exactly one run
per window, which runs with the latest input. Both backends."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import defaultdict
from typing import Any

from durably import Durably
from durably.store.models import Run
from tests.acceptance.conftest import ROOT, Procs
from tests.helpers import eventually, scaled, tail

APP = "tests.apps.debounce:app"
WRITERS = ("a", "b", "c")


def _start_all(procs: Procs, key: str, count: int, *options: str) -> list[dict[str, Any]]:
    """Run the three starters at once (from one agreed instant); every start they made."""
    at = time.time() + scaled(3)  # each connects first, then waits for this instant
    out = procs.logs / f"{key}.jsonl"
    logs = {writer: procs.logs / f"starter-{key}-{writer}.log" for writer in WRITERS}
    cmd = [sys.executable, "-m", "tests.apps.debounce"]
    started = {
        writer: procs.processes.start(
            [*cmd, writer, str(count), "--key", key, "--at", str(at), "--out", str(out), *options],
            log,
            env=procs.env(DURABLY_APP=APP),
            cwd=ROOT,
        )
        for writer, log in logs.items()
    }
    for writer, proc in started.items():
        assert proc.wait(timeout=scaled(120)) == 0, tail(logs[writer])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == count * len(WRITERS)
    return lines


async def _runs(url: str, key: str, finished: bool = False) -> list[Run]:
    """The runs started with debounce key `key` (each run's input names it); with
    `finished`, once there are some and every one has completed."""
    async with Durably(url) as client:

        async def listed() -> list[Run] | None:
            runs = await client.list_runs(workflow="digest", limit=10_000)
            mine = [r for r in runs if r.input["key"] == key]
            done = mine and all(r.status == "completed" for r in mine)
            return mine if done or not finished else None

        found: list[Run] = await eventually(listed, 60, what=f"the runs of key {key!r}")
        return found


def test_three_processes_starting_at_once_make_one_run(procs: Procs) -> None:
    # No worker yet: nothing closes the window, so all 90 starts must name one run.
    starts = _start_all(procs, "k1", 30, "--debounce", "1s")
    assert len({s["run_id"] for s in starts}) == 1
    assert sum(not s["joined"] for s in starts) == 1  # one start opened the window
    [run_id] = {s["run_id"] for s in starts}
    [run] = asyncio.run(_runs(procs.url, "k1"))
    assert run.run_id == run_id
    assert run.status == "pending"
    # The stored input is the last start of one of the three (each overwrote its own).
    assert (run.input["writer"], run.input["n"]) in {(w, 29) for w in WRITERS}
    procs.worker("w1", DURABLY_APP=APP)
    [done] = asyncio.run(_runs(procs.url, "k1", finished=True))
    assert done.output == run.input and done.attempts == 1


def test_windows_close_as_workers_claim_them_each_with_its_latest_input(procs: Procs) -> None:
    for name in ("w1", "w2"):
        procs.worker(name, "--poll", "200ms", DURABLY_APP=APP)
    starts = _start_all(procs, "k2", 60, "--debounce", "200ms", "--max", "500ms",
                        "--gap", "0.05")  # fmt: skip
    ids = {s["run_id"] for s in starts}
    runs = asyncio.run(_runs(procs.url, "k2", finished=True))
    assert {r.run_id for r in runs} == ids and len(ids) >= 2  # several windows
    # Exactly one start opened each window; every other start joined one.
    assert sum(not s["joined"] for s in starts) == len(ids)
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in starts:
        by_run[s["run_id"]].append(s)
    order = {r.run_id: r.created_at for r in runs}
    for run in runs:
        ran = (run.output["writer"], run.output["n"])
        assert run.output == run.input and run.attempts == 1
        assert ran in {(s["writer"], s["n"]) for s in by_run[run.run_id]}
        # Each writer's later start into a window overwrote its earlier ones: the run
        # ran with the last start its writer made into it.
        last = max(s["n"] for s in by_run[run.run_id] if s["writer"] == ran[0])
        assert ran[1] == last
    for writer in WRITERS:
        # A writer meets the windows in the order they opened, and never goes back to one.
        seen = [s["run_id"] for s in starts if s["writer"] == writer]
        distinct = list(dict.fromkeys(seen))
        assert all(seen[i] == seen[i + 1] or seen[i + 1] not in seen[:i + 1]
                   for i in range(len(seen) - 1))  # fmt: skip
        assert [order[r] for r in distinct] == sorted(order[r] for r in distinct)
