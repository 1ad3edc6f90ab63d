"""The runs a worker executes now, and what it does to them: halt one (its step bodies are
interrupted at once), poke one, act on what the database said of them, and, as the worker
stops, let them end within its grace and release the others."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping

from ..backends import Row
from ..execution.execution import Execution
from ..execution.runlog import Stop

log = logging.getLogger("durably.worker")


class Running(Mapping[str, tuple[Execution, asyncio.Task[None]]]):
    """Each run executing here, by id: its execution and the task that runs it."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[Execution, asyncio.Task[None]]] = {}

    def __getitem__(self, run_id: str) -> tuple[Execution, asyncio.Task[None]]:
        return self._runs[run_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def add(self, run_id: str, execution: Execution, task: asyncio.Task[None]) -> None:
        self._runs[run_id] = (execution, task)

    def discard(self, run_id: str, task: asyncio.Task[None]) -> bool:
        """`task` ended: forget its run, unless it runs under another task now; True if
        forgotten."""
        if self._runs.get(run_id, (None, None))[1] is not task:
            return False
        del self._runs[run_id]
        return True

    def held(self) -> dict[str, int]:
        """The fence of each run's lease, by run id."""
        return {run_id: x.lease.fence for run_id, (x, _) in self._runs.items()}

    def halt(self, run_id: str, stop: Stop) -> None:
        """Stop executing a run: its step bodies are interrupted at once."""
        entry = self._runs.get(run_id)
        if entry is not None and stop.replaces(entry[0].stop):
            log.warning("run %s: %s; cancelling its step bodies", run_id, stop)
            entry[0].halt(stop)

    def poke(self, run_id: str) -> None:
        entry = self._runs.get(run_id)
        if entry is not None:
            entry[0].poke()

    def settle(self, held: dict[str, int], still: dict[str, Row], lost: str) -> None:
        """Act on what the database said of the runs held when it was asked."""
        for run_id, fence in held.items():
            entry = self._runs.get(run_id)
            if entry is None or entry[0].lease.fence != fence:
                continue  # ended, or claimed again, since the question was asked
            row = still.get(run_id)
            if row is None:
                if not entry[0].concluded:  # else it let go itself, as the question was asked
                    self.halt(run_id, Stop(lost))
            elif row["status"] == "canceled":  # in case its NOTIFY was missed
                self.halt(run_id, Stop("canceled", "canceled"))
            elif row["wake_requested"]:
                self.poke(run_id)

    async def drain(self, grace_s: float) -> None:
        """Let the runs end within `grace_s`; then release those still running (claimable
        at once elsewhere), and wait for their last writes."""
        if not self._runs:
            return
        log.info("draining %d runs (up to %.0fs)", len(self._runs), grace_s)
        tasks = [task for _, task in self._runs.values()]
        await asyncio.wait(tasks, timeout=grace_s)
        for x, task in list(self._runs.values()):
            if not task.done():
                self.halt(x.run_id, Stop("the worker is shutting down", release=True))
        await asyncio.gather(*(task for _, task in self._runs.values()),
                             return_exceptions=True)  # fmt: skip
