"""What a worker claims (§4.9): only the (workflow, version) pairs it serves, oldest first,
whatever backlog of other versions lies ahead of them, and only runs of its app's namespace."""

from __future__ import annotations

import random
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from durably import Durably, Workflow
from durably.store.queues import QueueClaims
from durably.worker.claimer import Claimer
from tests.helpers import scaled

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


def _namespaced(db_url: str, namespace: str, queued: bool) -> tuple[Durably, Workflow[int, str]]:
    """An app of `namespace` whose ("job", "v1") says which namespace's code ran it."""
    app = Durably(db_url, namespace=namespace)

    @app.workflow(name="job", version="v1", queue=app.queue("q") if queued else None)
    async def job(ctx: Any, k: int) -> str:
        return str(await ctx.step.run("who", lambda: namespace))

    return app, job


# Every path of a claim: unqueued runs; a queue both namespaces declare; a queue no worker
# declares (its runs are claimed as unqueued ones); a queue only other workers declare.
@pytest.mark.parametrize("queues", ["unqueued", "queued", "lapsed", "foreign"])
async def test_a_worker_claims_the_runs_of_its_own_namespace_only(db_url: str, queues: str) -> None:
    prod, prod_job = _namespaced(db_url, "prod", queued=queues != "unqueued")
    staging, staging_job = _namespaced(db_url, "staging", queued=queues == "queued")
    async with prod, staging:
        if queues == "foreign":  # as a worker of prod serving other workflows would
            await QueueClaims(prod.store).declare(list(prod.queues.values()), scaled(60))
        theirs = await prod_job.start(1)
        # Staging's claims find nothing of prod's on any path, nor see it due.
        claimer = Claimer(staging, "staging-w", 30.0)
        assert await claimer.claim(10, []) == []
        assert (await claimer.next_due())[0] is None
        # Nor does its worker, which runs its own run, due after prod's (claims take the
        # oldest first), and then stops.
        mine = await staging_job.start(2)
        async with staging.worker(worker_id="staging-w"):
            assert await mine.result(timeout=scaled(10)) == "staging"
        run = await prod.get_run(theirs.run_id)
        assert (run.status, run.attempts, run.fence) == ("pending", 0, 0)

        async with prod.worker(worker_id="prod-w"):
            assert await theirs.result(timeout=scaled(10)) == "prod"
        steps = await prod.list_steps(theirs.run_id)
        assert [(s.step, s.status, s.worker_id) for s in steps] == [("who", "completed", "prod-w")]


async def test_a_queue_claim_passes_over_a_run_the_worker_still_executes(db_url: str) -> None:
    """A run of a lapsed queue is taken by the unqueued claim; a crash loses that claim
    (PostgreSQL commits it without waiting for its flush; put back by hand here) while its
    execution runs on. Its queue declared again, the queue's claim must pass over it too:
    given back to the same worker with the same fence, two executions would hold one lease
    (review)."""
    app = Durably(db_url)
    q = app.queue("q")
    app.workflow(name="job", version="v1", queue=q)(_noop)
    async with app:
        run_id = (await app.workflows[("job", "v1")].start()).run_id
        [row] = await app.store.claim("w", [("job", "v1")], 1, 30.0)  # "q": nobody declares it
        assert (row["id"], row["fence"]) == (run_id, 1)
        _lose_claim(db_url, run_id)
        await QueueClaims(app.store).declare([q], 60.0)
        assert await Claimer(app, "w", 30.0).claim(10, [run_id]) == []
        [(row, _)] = await Claimer(app, "w", 30.0).claim(10, [])
        assert (row["id"], row["fence"]) == (run_id, 1)


def _lose_claim(db_url: str, run_id: str) -> None:
    """The run as it was before its claim: a crash lost it."""
    back = ("SET fence = fence - 1, worker_id = NULL, status = 'pending',"
            " lease_expires_at = NULL, available_at = {now} WHERE id = {arg}")  # fmt: skip
    if db_url.startswith("sqlite"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            conn.execute("UPDATE durably_runs " + back.format(now="?", arg="?"),
                         (time.time(), run_id))  # fmt: skip
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE durably.runs " + back.format(now="now()", arg="%s"), (run_id,))
