"""What a worker does with the database's notifications (PostgreSQL NOTIFY; SQLite's
data_version): a cancel halts the run at once, a wake pokes it, new work is announced;
on SQLite, any commit makes the worker check that its runs are still its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ..core.errors import DatabaseUnavailable
from ..execution.runlog import Stop
from ..store.store import Store
from .early import EarlyCancels
from .running import Running


class Notices:
    """Acts on each notification (`on_message`, the connector's listener)."""

    def __init__(
        self, store: Store, worker_id: str, lease_s: float, concurrency: int,
        running: Running, announce: Callable[[], None],
    ) -> None:  # fmt: skip
        self.store = store
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.running = running
        self.announce = announce  # there may be work to claim: look now
        self._early = EarlyCancels(lease_s)
        self._changed = False  # SQLite: a commit seen that no check has looked at yet
        self.check_task: asyncio.Task[None] | None = None

    def on_message(self, message: str) -> None:
        if message.startswith("ended:"):  # for those waiting for a result (`_endwatch`)
            return
        if message.startswith("cancel:"):
            run_id = message.removeprefix("cancel:")
            if run_id in self.running:
                self.running.halt(run_id, Stop("canceled", "canceled"))
            else:  # its claim may be on its way back: see EarlyCancels
                self._early.remember(run_id, asyncio.get_running_loop().time())
        elif message.startswith("wake:"):
            self.running.poke(message.removeprefix("wake:"))
            return
        elif message == "changed" and self.running:
            # SQLite: some commit happened, maybe our own (so at most ten a second): check
            # our runs are still ours, and look for new work if a slot is free.
            self._changed = True
            if self.check_task is None or self.check_task.done():
                self.check_task = asyncio.create_task(self._check_held())
            return
        self.announce()

    def canceled_early(self, run_id: str) -> bool:
        """`run_id` was just claimed: True if a cancel of it was notified shortly before."""
        return self._early.claimed(run_id, asyncio.get_running_loop().time())

    async def _check_held(self) -> None:
        # Commits seen while a round is under way make one more round: none is dropped.
        while self._changed:
            self._changed = False
            held = self.running.held()
            with contextlib.suppress(DatabaseUnavailable):
                still = await self.store.check_held(self.worker_id, held)
                self.running.settle(held, still, "the run was taken over")
            if len(self.running) < self.concurrency:
                self.announce()
            await asyncio.sleep(0.1)  # at most ten rounds a second
