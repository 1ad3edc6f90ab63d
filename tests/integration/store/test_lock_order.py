"""Run rows are locked in one global order (ids ascending), so a user's `cancel()` of a
parent and the end of one of its children never deadlock (PostgreSQL: SQLite has one
writer at a time)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from durably import Durably
from durably.core.errors import LeaseLostError
from durably.store.records import Lease, NewRun, RunEnd
from tests.helpers import eventually, scaled


def _family(url: str) -> tuple[Durably, Any]:
    app = Durably(url)

    @app.workflow(name="child", version="v1")
    async def child(ctx: Any) -> int:
        await ctx.step.wait_for_signal("never")
        return 1

    @app.workflow(name="parent", version="v1")
    async def parent(ctx: Any) -> int:
        result: int = await ctx.step.run_workflow(child)
        return result

    return app, parent


async def _waiting_on(url: str, n: int) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        row = await cur.fetchone()
        return row is not None and row[0] >= n


async def test_cancel_of_a_parent_while_its_child_ends_does_not_deadlock(pg_url: str) -> None:
    """The child's end stalls (on one of its step rows, held here) while the cancel of the
    parent comes: both go through once it goes on, the cancel winning."""
    app, parent = _family(pg_url)
    async with app:
        handle = await parent.start()
        async with app.worker(concurrency=2):
            await eventually(lambda: _all_wait(app), what="parent and child to wait")
        child_row = (await app.list_runs(workflow="child"))[0]
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute(  # woken (as by a signal), and held by a worker of ours
                "UPDATE durably.runs SET status = 'pending', available_at = now() WHERE id = %s",
                (child_row.run_id,),
            )
        rows = await app.store.claim("held", [("child", "v1")], 1, 60.0)
        lease = Lease(rows[0]["id"], rows[0]["fence"], "held", rows[0]["attempts"])
        assert lease.run_id == child_row.run_id
        async with await psycopg.AsyncConnection.connect(pg_url) as blocker:
            await blocker.execute(
                "SELECT 1 FROM durably.step_attempts WHERE run_id = %s AND status = 'running'"
                " FOR UPDATE", (lease.run_id,),
            )  # fmt: skip
            end = asyncio.create_task(app.store.ends.finish_run(lease, "completed", "1"))
            await eventually(lambda: _waiting_on(pg_url, 1), what="the child's end to wait")
            cancel = asyncio.create_task(app.cancel(handle.run_id))
            await eventually(lambda: _waiting_on(pg_url, 2), what="the cancel to wait")
            await blocker.rollback()
        canceled = await asyncio.wait_for(cancel, scaled(15))
        await asyncio.wait_for(end, scaled(15))
        assert canceled.status == "canceled"
        assert (await app.get_run(lease.run_id)).status in ("completed", "canceled")


async def _all_wait(app: Durably) -> bool:
    runs = await app.list_runs()
    return len(runs) == 2 and all(r.status == "waiting" for r in runs)


async def _families(app: Durably, n: int) -> list[tuple[str, Lease]]:
    """`n` pending parents, each with a child held by worker "held"."""
    pairs = []
    for _ in range(n):
        parent, _ = await app.store.create_run(NewRun("parent", "v1", "null", 1))
        await app.store.create_run(NewRun("child", "v1", "null", 1, parent_run_id=parent.run_id))
        pairs.append(parent.run_id)
    rows = await app.store.claim("held", [("child", "v1")], n, 60.0)
    leases = {r["parent_run_id"]: Lease(r["id"], r["fence"], "held", r["attempts"]) for r in rows}
    return [(p, leases[p]) for p in pairs]


async def test_cancels_of_parents_while_children_end_never_deadlock(pg_url: str) -> None:
    """Hammer: parents canceled while their children end, alone (`finish_run`) or by group
    commit (`finish_many`); no cancel may fail."""
    app, _ = _family(pg_url)
    async with app:
        for _ in range(4):
            families = await _families(app, 40)

            async def end(k: int, lease: Lease) -> None:
                if k % 2:
                    await app.store.ends.finish_run(lease, "completed", "1")
                else:
                    await app.store.ends.finish_many("held", [RunEnd(lease, "completed", "1")])

            results = await asyncio.gather(
                *(end(k, lease) for k, (_, lease) in enumerate(families)),
                *(app.cancel(parent) for parent, _ in families),
                return_exceptions=True,
            )  # fmt: skip
            failures = [r for r in results if isinstance(r, BaseException)
                        and not isinstance(r, LeaseLostError)]  # fmt: skip
            assert failures == []


async def test_a_cancel_that_loses_a_deadlock_is_run_again(pg_url: str) -> None:
    """Another session locks the tree's rows in the other order (as a writer that does not
    follow the rule might): PostgreSQL aborts the cancel, which waited first; the cancel is
    run again and goes through, instead of failing back to its caller."""
    app, parent = _family(pg_url)
    async with app:
        await parent.start()
        async with app.worker(concurrency=2):
            await eventually(lambda: _all_wait(app), what="parent and child to wait")
        runs = sorted(await app.list_runs(), key=lambda r: r.run_id)
        first, second = runs[0].run_id, runs[1].run_id  # the cancel locks `first` first
        root = next(r.run_id for r in runs if r.workflow == "parent")
        async with await psycopg.AsyncConnection.connect(pg_url) as other:
            await other.execute("SELECT 1 FROM durably.runs WHERE id = %s FOR UPDATE",
                                (second,))  # fmt: skip
            cancel = asyncio.create_task(app.cancel(root))
            await eventually(lambda: _waiting_on(pg_url, 1), what="the cancel to wait")
            # Now the other order: a deadlock, which the cancel detects (it waited first).
            await other.execute("SELECT 1 FROM durably.runs WHERE id = %s FOR UPDATE",
                                (first,))  # fmt: skip
            await other.commit()
        canceled = await asyncio.wait_for(cancel, scaled(30))
    assert canceled.status == "canceled"
