"""Queues: flow control enforced by the database on the claim path (SPEC §4.17).

A queue caps the runs of its workflows that are `running` at once (`concurrency`), those
sharing a `concurrency_key` (`per_key`) and the first claims in any sliding window
(`rate`), and claims the highest `priority` first. A worker claims a queue's runs in a
transaction that locks the queue's row (PostgreSQL; SQLite's IMMEDIATE transaction does
the same), so workers claiming at once never exceed a limit. Runs that sleep or wait are
not `running` and hold no slot; canceled runs running their compensations do (they run
code).

A queue is *declared* while some worker that serves it renewed its declaration within one
lease (the queue's `declared_until` row: at the worker's start, at each heartbeat, at each
claim of the queue). A deploy that renames or removes a queue leaves its runs in it (a
run's queue never changes); once no worker declares it, the unqueued claim takes them
(pending ones, and running ones whose worker died, once their lease ends), with no limit:
a queue nobody declares has none. A claim of a declared queue and an unqueued claim of
its runs exclude each other through the queue's row (see `claim` in the dialects'
`queries.sql`), so runs of a declared queue are only ever claimed within its limits; when
a worker declares such a queue again, the runs claimed meanwhile count against them.

A worker claims only the runs of its app's namespace, but a queue is one per schema: its
row (limits, declaration, lock) is shared by the namespaces that declare it, and its limits
count the runs of all of them, as one cap on whatever the queue protects.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..core.durations import parse_duration
from ..core.errors import ConfigurationError, InvalidInput
from .confirm import ClaimConfirmation

if TYPE_CHECKING:
    from ..backends import Row
    from ..client.app import Durably
    from .store import Store

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_RATE = re.compile(r"\s*(\d+)\s*/\s*(.+?)\s*")


def parse_rate(rate: str) -> tuple[int, float]:
    """`"10/1m"` → (10, 60.0): at most 10 first claims in any window of 60 seconds.

    Raises:
        ConfigurationError: not `N/DURATION` with N ≥ 1 and a positive duration.
    """
    match = _RATE.fullmatch(rate) if isinstance(rate, str) else None
    if match is None:
        raise ConfigurationError(f"invalid rate {rate!r}: write it as N/DURATION, e.g. '10/1m'")
    count = int(match.group(1))
    period = match.group(2)
    try:
        seconds = parse_duration(period if period[0].isdigit() else f"1{period}").total_seconds()
    except ConfigurationError as exc:
        raise ConfigurationError(f"invalid rate {rate!r}: {exc}") from exc
    if count < 1 or seconds <= 0:
        raise ConfigurationError(f"invalid rate {rate!r}: the count and period must be > 0")
    return count, seconds


def _limit(name: str, value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"queue {name!r}: {what} must be a whole number ≥ 1: {value!r}")
    return value


@dataclass(frozen=True)
class Queue:
    """A queue declared with `app.queue(...)`; pass it as `@app.workflow(queue=q)`.

    Attributes:
        name: the queue's name (runs store it; `durably runs --queue NAME`).
        concurrency: at most this many of its runs `running` at once (None: no cap).
        per_key: at most this many running per `concurrency_key` (None: no cap).
        rate: `"N/DURATION"`, at most N first claims in any window (None: no cap).
        priority: claim the larger `priority` of `start(..., priority=)` first.
    """

    name: str
    concurrency: int | None = None
    per_key: int | None = None
    rate: str | None = None
    priority: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigurationError(
                f"invalid queue name {self.name!r}: use 1-100 letters, digits and _ . : -"
            )
        _limit(self.name, self.concurrency, "concurrency")
        _limit(self.name, self.per_key, "per_key")
        if self.rate is not None:
            parse_rate(self.rate)

    def params(self, ttl_s: float) -> dict[str, Any]:
        """The queue's row, as `upsert_queue` takes it (declared for `ttl_s` seconds)."""
        count, period = parse_rate(self.rate) if self.rate is not None else (None, None)
        return {"name": self.name, "concurrency": self.concurrency, "per_key": self.per_key,
                "rate_limit": count, "rate_period_s": period,
                "priority": self.priority, "ttl": ttl_s}  # fmt: skip

    def check_start(self, workflow: str, concurrency_key: str | None, priority: int) -> None:
        """Refuse start options this queue cannot honour (nothing is written)."""
        if concurrency_key is not None and not isinstance(concurrency_key, str):
            raise InvalidInput(f"concurrency_key must be text, not {concurrency_key!r}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidInput(f"priority must be a whole number, not {priority!r}")
        if priority != 0 and not self.priority:
            raise InvalidInput(
                f"workflow {workflow!r}: queue {self.name!r} does not order by priority; "
                "declare it with app.queue(..., priority=True)"
            )


def check_unqueued(workflow: str, concurrency_key: str | None, priority: int) -> None:
    """`concurrency_key` and `priority` need a queue: refuse them on a workflow without."""
    if concurrency_key is not None or priority != 0:
        raise InvalidInput(
            f"workflow {workflow!r} has no queue: concurrency_key and priority apply only to "
            "workflows declared with @app.workflow(..., queue=app.queue(...))"
        )


class QueueClaims:
    """The claim side of queues, over the store's connector."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.channel = store.channel
        self.namespace = store.namespace  # whose runs are claimed

    async def declare(self, queues: list[Queue], ttl_s: float = 30.0) -> None:
        """Write the queues' limits (the claim reads them from the database) and declare
        them for `ttl_s` seconds (a worker's lease)."""
        for queue in sorted(queues, key=lambda q: q.name):  # rows locked in name order
            await self.db.fetch("upsert_queue", **queue.params(ttl_s))

    async def renew(self, names: list[str], ttl_s: float) -> None:
        """Keep the queues `names` declared for `ttl_s` seconds more (a heartbeat)."""
        if names:
            await self.db.fetch("renew_queues", names=sorted(names), ttl=ttl_s)

    async def claim(
        self, queue: str, worker_id: str, pairs: list[tuple[str, str]], limit: int,
        lease_s: float, per_key: bool = True, held: Sequence[str] = (),
    ) -> list[Row]:  # fmt: skip
        """Claim up to `limit` runs of the namespace in `queue` within its limits (several
        round trips on PostgreSQL: the lock and the claim are statements of their own, so
        that the claim's snapshot sees every claim committed before it got the lock).

        Candidates are locked as they are read: `limit` of them per (workflow, version),
        more when a `per_key` limit may pass over some (`per_key`)."""
        params = {
            "queue": queue, "namespace": self.namespace, "worker_id": worker_id,
            "workflows": [p[0] for p in pairs], "versions": [p[1] for p in pairs],
            "limit": limit,
            "scan": max(4 * limit, 32) if per_key else limit,
            "lease": lease_s, "token": uuid.uuid4().hex, "channel": self.channel,
            "held": list(held),  # runs the worker still executes (see `Store.claim`)
        }  # fmt: skip
        async with self.db.transaction() as tx:
            if not await tx.fetch("lock_queue", queue=queue, ttl=lease_s):
                return []  # not declared yet
            return await tx.fetch("claim_queue", **params)

    async def foreign(self, mine: list[str], pairs: list[tuple[str, str]]) -> list[str]:
        """Queues other workers declare, not in `mine`, that hold due runs of `pairs` in the
        namespace."""
        rows = await self.db.fetch(
            "foreign_queues", mine=mine, namespace=self.namespace,
            workflows=[p[0] for p in pairs], versions=[p[1] for p in pairs],
        )  # fmt: skip
        return [r["name"] for r in rows]

    async def next_at(
        self, queue: str, pairs: list[tuple[str, str]]
    ) -> tuple[datetime | None, datetime]:
        """When the queue may have a run to claim next (None: when a slot frees)."""
        rows = await self.db.fetch(
            "queue_next", queue=queue, namespace=self.namespace,
            workflows=[p[0] for p in pairs], versions=[p[1] for p in pairs],
        )  # fmt: skip
        return rows[0]["next_at"], rows[0]["db_now"]

    async def counts(self) -> list[Row]:
        """Each declared queue with its limits and `running` and `waiting` counts."""
        return await self.db.fetch("queue_counts")


class Claimer:
    """What a worker claims: unqueued runs in one statement (one round trip), then each
    queue's in a transaction of its own; who goes first turns, so none starves another.

    A queue that gave some runs but fewer than asked is `saturated` (most likely at its
    limit with more due): when a run of it ends here, the worker claims again at once
    rather than waiting for a batch of free slots (one that gave none is not: at the end
    of a backlog, every run's end would cost a claim). A queue held back by its rate says
    when its window reopens.
    """

    def __init__(self, app: Durably, worker_id: str, lease_s: float) -> None:
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
        return rows

    async def _claim_unqueued(self, want: int) -> list[tuple[Row, ClaimConfirmation | None]]:
        store = self.app.store
        rows = await store.claim(self.worker_id, self._pairs(), want, self.lease_s, self._held)
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
        got = await self.queues.claim(source, self.worker_id, self._pairs(), want,
                                      self.lease_s, per_key, self._held)  # fmt: skip
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
        next_at, db_now = await self.app.store.next_due(self._pairs())
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
