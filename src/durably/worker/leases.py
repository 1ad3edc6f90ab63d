"""The leases of the runs a worker executes, kept by its heartbeat.

Leases are renewed for all held runs in one statement; a run whose lease is lost, or ends
here before it could be renewed, has its step bodies cancelled at once (SPEC §4.4).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..core.errors import DatabaseUnavailable
from ..execution.runlog import Stop
from ..store.store import Store
from .running import Running

log = logging.getLogger("durably.worker")


class Leases:
    """Each run's lease as this worker knows it (when it ends, on the loop's clock), and
    the heartbeat that renews them and says the worker is alive (`alive`)."""

    def __init__(
        self, store: Store, worker_id: str, lease_s: float, heartbeat_s: float,
        running: Running, alive: Callable[[], Awaitable[None]],
    ) -> None:  # fmt: skip
        self.store = store
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self.running = running
        self.alive = alive
        self._until: dict[str, float] = {}
        self._seen = float("-inf")  # when the workers table last heard of us (loop time)
        self.asks: set[asyncio.Task[None]] = set()  # renewals of runs canceled early

    def taken(self, run_id: str) -> None:
        """`run_id` was claimed just now, for a lease."""
        self._until[run_id] = asyncio.get_running_loop().time() + self.lease_s

    def ended(self, run_id: str) -> None:
        self._until.pop(run_id, None)

    async def renew(self, run_ids: list[str]) -> None:
        held = {k: v for k, v in self.running.held().items() if k in run_ids}
        if not held:
            return
        sent = asyncio.get_running_loop().time()
        still = await self.store.heartbeat(self.worker_id, held, self.lease_s)
        for run_id in still:
            self._until[run_id] = sent + self.lease_s
        self.running.settle(held, still, "its lease was lost")

    def ask(self, run_id: str) -> None:
        """Renew `run_id`'s lease now, in a task of its own (see `_ask`)."""
        ask = asyncio.create_task(self._ask(run_id), name=f"durably-ask-{run_id}")
        self.asks.add(ask)
        ask.add_done_callback(self.asks.discard)

    async def _ask(self, run_id: str) -> None:
        """A cancel of `run_id` was notified before its claim returned: the database
        decides (a renewal halts it if it is canceled still)."""
        try:
            await self.renew([run_id])
        except DatabaseUnavailable as exc:  # the next heartbeat asks again
            log.warning("run %s: could not look for a cancel: %s", run_id, exc)
        except Exception:  # a defect: said loudly, never an unretrieved task's error
            log.exception("run %s: looking for a cancel failed", run_id)

    async def keep(self) -> None:
        """Beat every `heartbeat`, and halt each run whose lease ends before it is renewed.

        The local lease deadlines are checked on time whatever the database does: a beat
        runs as a task of its own that this loop waits for only until the next deadline
        or beat, and a beat still waiting (a silent network) is not started again. It is
        not cancelled either: unwinding a statement on a dead connection takes seconds
        (psycopg asks the server to cancel it), and the connector's own deadline ends it.
        """
        loop = asyncio.get_running_loop()
        beat: asyncio.Task[None] | None = None
        next_beat, late = loop.time(), False
        try:
            while True:
                now = loop.time()
                if now >= next_beat:
                    next_beat = now + self.heartbeat_s
                    if beat is None or beat.done():
                        beat, late = asyncio.create_task(self._beat(), name="durably-beat"), False
                    elif not late:  # said once per beat
                        late = True
                        log.warning("heartbeat: the database has not answered for %gs",
                                    self.heartbeat_s)  # fmt: skip
                wake = min([next_beat, *self._until.values()])
                timeout = max(0.005, wake - loop.time())
                if beat is not None and not beat.done():
                    await asyncio.wait([beat], timeout=timeout)
                else:
                    await asyncio.sleep(timeout)
                self._expire(loop.time())
        finally:
            if beat is not None and not beat.done():
                beat.cancel()
                await asyncio.wait([beat], timeout=1.0)

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self.renew(list(self.running))  # first: the leases cannot wait
            if loop.time() - self._seen >= self.heartbeat_s:
                await self.alive()
                self._seen = loop.time()
        except DatabaseUnavailable as exc:
            log.warning("heartbeat failed: %s", exc)
        except Exception:
            log.exception("heartbeat failed")

    def _expire(self, now: float) -> None:
        for run_id, until in list(self._until.items()):
            if until <= now:
                del self._until[run_id]
                self.running.halt(run_id, Stop("its lease expired before it could be renewed"))
