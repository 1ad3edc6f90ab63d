"""The continue's transaction (store/continues.py): fenced as a run's end is, so a lease
lost at the continue commits neither the end nor the next run, nor moves a signal."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from durably import Durably, LeaseLostError
from durably.store.records import Lease, PendingStep
from tests.helpers import scaled


def _app(db_url: str) -> Durably:
    app = Durably(db_url)

    @app.workflow(name="looping", version="v1")
    async def looping(ctx: Any, n: int) -> int:
        return n

    return app


def _addressed(url: str) -> list[str]:
    """The runs the stored signals are addressed to."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return [r[0] for r in conn.execute("SELECT run_id FROM durably_signals")]
    with psycopg.connect(url) as pg:
        return [r[0] for r in pg.execute("SELECT run_id FROM durably.signals")]


async def _claimed(app: Durably) -> tuple[str, Lease]:
    run = (await app.start("looping", 0, idempotency_key="chain-key")).run_id
    [row] = await app.store.claim("w", [("looping", "v1")], 1, scaled(30))
    assert row["id"] == run
    return run, Lease(row["id"], row["fence"], "w", row["attempts"])


async def test_a_lost_lease_commits_nothing(db_url: str) -> None:
    app = _app(db_url)
    async with app:
        run_id, lease = await _claimed(app)
        await app.send_signal("later", "kept", run_id=run_id)
        stale = Lease(lease.run_id, lease.fence - 1, lease.worker_id, lease.workflow_attempt)
        record = PendingStep(1, 1, "s", "function", "completed", output_json="1", seq=1)
        with pytest.raises(LeaseLostError):
            await app.store.continues.continue_run(stale, "next-run", "1", "chain-key", [record])
        run = await app.get_run(run_id)
        assert run.status == "running" and run.idempotency_key == "chain-key"
        assert [r.run_id for r in await app.list_runs()] == [run_id]
        assert await app.list_steps(run_id) == []
        assert _addressed(db_url) == [run_id]
        # The live lease continues: one next run, the signal and the key with it.
        assert await app.store.continues.continue_run(lease, "next-run", "1", "chain-key")
        run = await app.get_run(run_id)
        assert run.status == "continued" and run.continued_as == "next-run"
        assert run.idempotency_key is None
        after = await app.get_run("next-run")
        assert (after.status, after.input, after.continued_from) == ("pending", 1, run_id)
        assert after.idempotency_key == "chain-key"
        assert _addressed(db_url) == ["next-run"]
        # Continued once: the same lease cannot continue it again.
        with pytest.raises(LeaseLostError):
            await app.store.continues.continue_run(lease, "another", "2", "chain-key")
        assert len(await app.list_runs()) == 2


async def test_canceled_as_it_continues(db_url: str) -> None:
    """A cancel that came first wins: the continue is refused (False: the caller undoes
    and ends the run canceled) and no next run is written."""
    app = _app(db_url)
    async with app:
        run_id, lease = await _claimed(app)
        await app.cancel(run_id)
        assert not await app.store.continues.continue_run(lease, "next-run", "1", "chain-key")
        assert [r.run_id for r in await app.list_runs()] == [run_id]
