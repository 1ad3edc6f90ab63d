"""What a worker claims, and in which order: unqueued runs, then each queue's (see
`store.queues` for how a queue's limits hold across workers)."""

from __future__ import annotations

import logging
from datetime import datetime

from ..backends import Row
from ..store.confirm import ClaimConfirmation
from ..store.queues import QueueClaims
from .byname import Served, served
from .host import Host

log = logging.getLogger("durably.worker")


class Claimer:
    """What a worker claims: unqueued runs in one statement (one round trip), then each
    queue's in a transaction of its own; who goes first turns, so none starves another.

    A queue that gave some runs but fewer than asked is `saturated` (most likely at its
    limit with more due): when a run of it ends here, the worker claims again at once
    rather than waiting for a batch of free slots (one that gave none is not: at the end
    of a backlog, every run's end would cost a claim). A queue held back by its rate says
    when its window reopens.
    """

    def __init__(self, app: Host, worker_id: str, lease_s: float) -> None:
        self.app = app
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.queues = QueueClaims(app.store)
        self._turn = 0
        self._saturated: set[str] = set()
        self._run_queue: dict[str, str] = {}
        # The last unqueued claim found runs, or `next_due` expects some: look again.
        self._unqueued_gave = False
        self._held: list[str] = []  # runs the worker executes: never claimed again meanwhile
        self.retry_in: float | None = None  # seconds until a rate window reopens

    def _pairs(self) -> list[tuple[str, str]]:
        return list(self.app.workflows)

    def _unqueued_pairs(self) -> list[Served]:
        # With `(name, NEWEST)` for the runs thin clients started (see `byname`): those
        # have no queue, so only the unqueued claim and its look-ahead read them.
        return served(self.app.workflows)

    def _queued(self) -> dict[str, list[tuple[str, str]]]:
        out: dict[str, list[tuple[str, str]]] = {}
        for pair, wf in self.app.workflows.items():
            if wf.queue is not None:
                out.setdefault(wf.queue.name, []).append(pair)
        return out

    async def claim(self, free: int, held: list[str]) -> list[tuple[Row, ClaimConfirmation | None]]:
        """Claim up to `free` runs, none of `held` (those the worker still executes); each
        with what confirms its claim before a body gets its fence (None: durable)."""
        queued = self._queued()
        self.retry_in = None
        self._turn += 1
        self._held = held
        if not queued:
            rows = await self._claim_unqueued(free)
        else:
            rows = await self._claim_queued(queued, free)
        # Queues declared only by other workers may hold runs of workflows this worker
        # serves (moved to another queue since): looked for when there is nothing else to
        # do (never on the way to work just announced), and now and then when busy.
        if len(rows) < free and (not rows or self._turn % 16 == 0):
            for source in await self.queues.foreign(sorted(queued), self._pairs()):
                if len(rows) < free:
                    rows += await self._claim_queue(source, free - len(rows))
        for row, _ in rows:
            if row["taken_from"] is not None:
                log.info("run %s (%s@%s): taken over from worker %s, whose lease expired "
                         "(attempt %d)", row["id"], row["workflow"], row["version"],
                         row["taken_from"], row["attempts"])  # fmt: skip
        return rows

    async def _claim_unqueued(self, want: int) -> list[tuple[Row, ClaimConfirmation | None]]:
        store = self.app.store
        pairs = self._unqueued_pairs()
        rows = await store.claim(self.worker_id, [p[:2] for p in pairs], want, self.lease_s,
                                 self._held, [p[2:] for p in pairs])  # fmt: skip
        fences = {r["id"]: r["fence"] for r in rows}
        confirm = ClaimConfirmation(store, self.worker_id, fences, self.lease_s)
        return [(row, confirm) for row in rows]

    async def _claim_queued(
        self, queued: dict[str, list[tuple[str, str]]], free: int
    ) -> list[tuple[Row, ClaimConfirmation | None]]:
        sources: list[str | None] = [*sorted(queued)]
        # Runs without a queue: of unqueued workflows, started before a queue was given to
        # theirs, or of a queue no worker declares any more. When every workflow has a
        # queue, these are looked for now and then only (and at once again while found).
        if len(queued) < len(self.app.workflows) or self._unqueued_gave or self._turn % 16 == 0:
            sources.append(None)
        start = self._turn % len(sources)
        rows: list[tuple[Row, ClaimConfirmation | None]] = []
        for source in sources[start:] + sources[:start]:
            want = free - len(rows)
            if want <= 0:
                break
            if source is None:
                got = await self._claim_unqueued(want)
                self._unqueued_gave = bool(got)
                rows += got
            else:
                rows += await self._claim_queue(source, want)
        return rows

    async def _claim_queue(
        self, source: str, want: int
    ) -> list[tuple[Row, ClaimConfirmation | None]]:
        declared = self.app.queues.get(source)  # None: a queue other workers declare
        per_key = declared is None or declared.per_key is not None
        # Every pair served, not only those of the queue's workflows today: a run keeps the
        # queue it was started in, and a workflow moved to another queue (or to none) while
        # this one is still declared leaves its runs here.
        attempts = [wf.retry.max_attempts for wf in self.app.workflows.values()]
        got = await self.queues.claim(source, self.worker_id, self._pairs(), want,
                                      self.lease_s, per_key, self._held, attempts)  # fmt: skip
        if 0 < len(got) < want:
            self._saturated.add(source)
        else:  # all it was asked for, or nothing: none left due (or taken elsewhere)
            self._saturated.discard(source)
        if len(got) < want and declared is not None and declared.rate is not None:
            await self._rate_wait(source, self._pairs())
        return [(row, None) for row in got]  # committed durably (see QueueClaims.claim)

    async def _rate_wait(self, queue: str, pairs: list[tuple[str, str]]) -> None:
        at, now = await self.queues.next_at(queue, pairs)
        if at is not None:
            wait = max((at - now).total_seconds(), 0.001)
            self.retry_in = wait if self.retry_in is None else min(self.retry_in, wait)

    async def next_due(self) -> tuple[datetime | None, datetime]:
        """When a run may next be claimable (None: nothing known; the poll decides)."""
        pairs = [p[:2] for p in self._unqueued_pairs()]
        next_at, db_now = await self.app.store.next_due(pairs)
        # Unqueued runs (or a lapsed queue's) will be due: the next claim looks for them.
        self._unqueued_gave |= next_at is not None
        for queue in self._queued():
            at, _ = await self.queues.next_at(queue, self._pairs())
            if at is not None and (next_at is None or at < next_at):
                next_at = at
        return next_at, db_now

    def started(self, run_id: str, queue: str | None) -> None:
        if queue is not None:
            self._run_queue[run_id] = queue

    def ended(self, run_id: str) -> bool:
        """A run left this worker: True if its queue's freed slot should be claimed now."""
        queue = self._run_queue.pop(run_id, None)
        return queue is not None and queue in self._saturated
