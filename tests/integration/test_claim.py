"""What a worker claims (§4.9): only the (workflow, version) pairs it serves, oldest first,
whatever backlog of other versions lies ahead of them."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from durably import Durably

SERVED = [("a", "v1"), ("b", "v1")]


async def _noop(ctx: Any) -> None:
    return None


def _close(a: datetime | None, b: datetime) -> bool:
    return a is not None and abs(a - b) < timedelta(milliseconds=1)


async def test_claims_served_versions_only_in_available_at_order(db_url: str) -> None:
    app = Durably(db_url)
    flows = {pair: app.workflow(name=pair[0], version=pair[1])(_noop)
             for pair in [*SERVED, ("a", "v2")]}  # fmt: skip
    now = datetime.now(UTC).replace(microsecond=0)
    async with app:
        # A backlog of a version this worker does not serve, due before anything else.
        for i in range(5):
            await flows[("a", "v2")].start(available_at=now - timedelta(hours=1, seconds=-i))
        # Served runs of both pairs, due at distinct times, started in shuffled order.
        due = [(SERVED[k % 2], now - timedelta(minutes=10, seconds=-k)) for k in range(7)]
        random.Random(7).shuffle(due)
        at_of = {}
        for pair, at in due:
            at_of[(await flows[pair].start(available_at=at)).run_id] = at
        await flows[("a", "v1")].start(available_at=now + timedelta(hours=1))
        oldest_served = min(at for _, at in due)
        next_at, _ = await app.store.next_due(SERVED)
        assert _close(next_at, oldest_served)
        next_at, _ = await app.store.next_due([("a", "v2")])
        assert _close(next_at, now - timedelta(hours=1))
        assert (await app.store.next_due([("nobody", "v9")]))[0] is None
        assert (await app.store.next_due([]))[0] is None

        batches: list[set[str]] = []
        for _ in range(4):
            rows = await app.store.claim("w", SERVED, 2, 30.0)
            assert all((r["workflow"], r["version"]) in SERVED for r in rows)
            batches.append({r["id"] for r in rows})
        oldest_first = sorted(at_of, key=at_of.__getitem__)
        assert batches == [set(oldest_first[i : i + 2]) for i in range(0, 8, 2)]
        assert await app.store.claim("w", SERVED, 10, 30.0) == []
        pending = await app.list_runs(status="pending")
        assert sorted(r.version for r in pending) == ["v1", "v2", "v2", "v2", "v2", "v2"]
        assert all(r.attempts == 0 and r.fence == 0 for r in pending)


async def test_a_worker_never_claims_a_run_it_still_executes(db_url: str) -> None:
    """On PostgreSQL a claim lost in a crash leaves its execution running while the run is
    due again, with the fence that execution holds: were its own worker to claim it again,
    two executions would hold one lease. The worker names the runs it executes, and the
    claim passes over them, whatever their state (here: due, as after such a loss)."""
    app = Durably(db_url)
    flow = app.workflow(name="a", version="v1")(_noop)
    async with app:
        mine = (await flow.start()).run_id
        other = (await flow.start()).run_id
        rows = await app.store.claim("w", SERVED, 10, 30.0, held=[mine])
        assert [r["id"] for r in rows] == [other]
        assert (await app.get_run(mine)).status == "pending"
        rows = await app.store.claim("w", SERVED, 10, 30.0, held=[other])
        assert [r["id"] for r in rows] == [mine]
