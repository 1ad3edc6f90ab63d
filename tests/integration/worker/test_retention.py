"""Retention (§4.18): purging finished runs, their steps and consumed signals; periodic
purges by workers."""

from __future__ import annotations

import contextlib
import sqlite3
from functools import partial
from typing import Any

import psycopg
import pytest

from durably import ConfigurationError, Durably, InvalidInput, RunNotFound
from durably.store.operations import Operations
from tests.helpers import duration, eventually, scaled


def _app(db_url: str, **options: Any) -> Durably:
    app = Durably(db_url, **options)

    @app.workflow(name="job", version="v1")
    async def job(ctx: Any, how: str) -> str:
        if how == "wait":
            return str(await ctx.step.wait_for_signal("never", timeout=duration(60)))
        got = await ctx.step.wait_for_signal(f"in:{how}", timeout=duration(30))
        if how == "fail":
            raise ValueError("failed on purpose")
        return f"{how}:{got}"

    return app


async def test_purge_deletes_finished_runs_steps_and_consumed_signals(db_url: str) -> None:
    app = _app(db_url)
    job = app.get_workflow("job")
    async with app:
        for how in ("ok", "fail"):
            await app.send_signal(f"in:{how}", how)  # buffered, consumed by the run
        async with app.worker():
            ok = await job.start("ok", idempotency_key="k1")
            failed = await job.start("fail")
            waiting = await job.start("wait")
            await ok.wait(timeout=scaled(10))
            await failed.wait(timeout=scaled(10))
            await eventually(lambda: _status(app, waiting.run_id, "waiting"), what="a wait")
        canceled = await job.start("x", available_at="+1h")
        await app.cancel(canceled.run_id)

        with pytest.raises(ConfigurationError):
            await app.purge(older_than="soon")
        with pytest.raises(InvalidInput, match="running"):
            await app.purge(older_than="0s", status=["running"])
        assert await app.purge(older_than="1h") == {"runs": 0, "signals": 0}
        assert len(await app.list_runs()) == 4

        assert await app.purge(older_than="0s", status="failed") == {"runs": 1, "signals": 1}
        with pytest.raises(RunNotFound):
            await app.list_steps(failed.run_id)
        assert await app.purge(older_than="0s") == {"runs": 2, "signals": 1}
        assert [r.run_id for r in await app.list_runs()] == [waiting.run_id]
        assert _step_rows(db_url) == {waiting.run_id}  # the purged runs' steps went with them
        assert await app.list_signals(pending=False) == []
        again = await job.start("ok", idempotency_key="k1")  # the key went with its run
        assert again.run_id != ok.run_id
        await app.cancel(waiting.run_id)


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


async def test_purge_goes_in_batches_and_keeps_children_of_live_parents(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="leaf", version="v1")
    async def leaf(ctx: Any, n: int) -> int:
        return n

    @app.workflow(name="parent", version="v1")
    async def parent(ctx: Any) -> int:
        value = await ctx.step.run_workflow(leaf, 7)
        await ctx.step.wait_for_signal("release", timeout=duration(30))
        return int(value)

    async with app:
        async with app.worker():
            leaves = [await leaf.start(n) for n in range(5)]
            for handle in leaves:
                await handle.wait(timeout=scaled(10))
            p = await parent.start()
            await eventually(lambda: _status(app, p.run_id, "waiting"), what="the parent")
            ops = Operations(app.store)
            done = await ops.purge(0, ["completed"], batch=2)
            assert done == {"runs": 5, "signals": 0}  # not the child: its parent runs
            assert len(await app.list_runs(workflow="leaf")) == 1
            await app.send_signal("release")
            assert await p.result(timeout=scaled(10)) == 7
        assert (await app.purge(older_than="0s"))["runs"] == 2


async def test_workers_with_retention_purge_periodically(db_url: str) -> None:
    app = _app(db_url, retention="0s")
    job = app.get_workflow("job")
    async with app, app.worker(), app.worker():
        await app.send_signal("in:ok", 1)
        handle = await job.start("ok")
        assert await handle.result(timeout=scaled(10)) == "ok:1"

        async def gone() -> bool:
            return not await app.list_runs()

        await eventually(gone, timeout=15, what="the finished run purged by a worker")


async def test_each_namespace_purges_its_own_runs(db_url: str) -> None:
    """The periodic purge reads the runs of its app's namespace: a worker of another
    namespace holding its job for an interval (15 min for 1 h kept) does not hold it up."""
    apps = [_app(db_url, namespace=namespace, retention="1h") for namespace in ("a", "b")]
    async with apps[0], apps[1]:
        ended = []
        for app in apps:
            handle = await app.get_workflow("job").start("x", available_at="+1h")
            await app.cancel(handle.run_id)
            ended.append(handle.run_id)
        _age(db_url, hours=2)
        for app, run_id in zip(apps, ended, strict=True):
            async with app.worker():
                await eventually(partial(_gone, app, run_id),
                                 what=f"the run of {app.namespace!r} purged")  # fmt: skip


def _age(url: str, hours: int) -> None:
    """Every finished run finished `hours` earlier (written outside the engine)."""
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute("UPDATE durably_runs SET finished_at = finished_at - ?", (hours * 3600,))
        return
    with psycopg.connect(url) as pg:
        pg.execute(
            "UPDATE durably.runs SET finished_at = finished_at - make_interval(hours => %s)",
            (hours,),
        )


def _step_rows(url: str) -> set[str]:
    """The runs that step attempts are stored for (read outside the engine)."""
    query = "SELECT DISTINCT run_id FROM {}step_attempts"
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            return {row[0] for row in conn.execute(query.format("durably_"))}
    with psycopg.connect(url) as pg:
        return {row[0] for row in pg.execute(query.format("durably."))}


async def _gone(app: Durably, run_id: str) -> bool:
    with contextlib.suppress(RunNotFound):
        await app.get_run(run_id)
        return False
    return True


async def test_a_run_deleted_by_a_plain_delete_takes_its_steps(pg_url: str) -> None:
    """A plain DELETE of runs (an operator's; the purge of another release, running beside
    this one during a deploy: see postgres/migrator.py) takes their steps with them. No step
    may outlive its run: nothing would ever delete it, and a run made again with its id (a
    child's id is a function of its parent's) would replay it as its own history. (Kept
    from a foreign key dropped and restored in one session: it found the hole.)"""
    app = _app(pg_url)
    job = app.get_workflow("job")
    async with app:
        await app.send_signal("in:ok", 1)
        async with app.worker():
            handle = await job.start("ok")
            assert await handle.result(timeout=scaled(10)) == "ok:1"
        assert _step_rows(pg_url) == {handle.run_id}
        with psycopg.connect(pg_url) as pg:  # purge_runs, verbatim
            pg.execute("DELETE FROM durably.runs WHERE id = ANY(CAST(%s AS text[])) RETURNING id",
                       ([handle.run_id],))  # fmt: skip
        assert _step_rows(pg_url) == set()
