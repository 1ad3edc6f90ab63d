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

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..backends import Row
    from .store import Store


class QueueLimits(Protocol):
    """A queue as declared in code (`workflow.queue.Queue`), as its row is written."""

    @property
    def name(self) -> str: ...

    def params(self, ttl_s: float) -> dict[str, Any]: ...


class QueueClaims:
    """The claim side of queues, over the store's connector."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.channel = store.channel
        self.namespace = store.namespace  # whose runs are claimed

    async def declare(self, queues: Sequence[QueueLimits], ttl_s: float = 30.0) -> None:
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
        max_attempts: Sequence[int] | None = None,
    ) -> list[Row]:  # fmt: skip
        """Claim up to `limit` runs of the namespace in `queue` within its limits (several
        round trips on PostgreSQL: the lock and the claim are statements of their own, so
        that the claim's snapshot sees every claim committed before it got the lock).

        Candidates are locked as they are read: `limit` of them per (workflow, version),
        more when a `per_key` limit may pass over some (`per_key`). `max_attempts`, one per
        pair: what the claim writes on a run started from SQL (`start_run` stores 0)."""
        params = {
            "queue": queue, "namespace": self.namespace, "worker_id": worker_id,
            "workflows": [p[0] for p in pairs], "versions": [p[1] for p in pairs],
            "limit": limit,
            "scan": max(4 * limit, 32) if per_key else limit,
            "lease": lease_s, "token": uuid.uuid4().hex, "channel": self.channel,
            "held": list(held),  # runs the worker still executes (see `Store.claim`)
            "max_attempts": list(max_attempts) if max_attempts is not None else [1] * len(pairs),
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
