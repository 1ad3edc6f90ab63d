"""What a worker logs as it takes a run over, and as a run fails (issue 31 item 12): a run
whose holder's lease expired is taken over with one INFO line naming the run and its
previous worker; a failure that no policy retries never logs "retrying" first."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import pytest
from pydantic import BaseModel

from durably import Durably, RetryPolicy
from durably.store.queues import QueueClaims
from durably.store.records import NewRun
from tests.helpers import eventually, scaled

THRICE = RetryPolicy(max_attempts=3, initial_interval="10ms")


def _lines(caplog: pytest.LogCaptureFixture, *parts: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if all(p in r.getMessage() for p in parts)]  # fmt: skip


@pytest.mark.parametrize("queued", [False, True])
async def test_a_takeover_is_logged_once_naming_the_previous_worker(
    db_url: str, caplog: pytest.LogCaptureFixture, queued: bool
) -> None:
    app = Durably(db_url)
    q = app.queue("jobs", concurrency=5) if queued else None

    @app.workflow(name="job", queue=q)
    async def job(ctx: Any, n: int) -> int:
        await ctx.step.sleep("pause", "10ms")  # parks: its next claim is no takeover
        doubled: int = await ctx.step.run("double", lambda: 2 * n)
        return doubled

    caplog.set_level(logging.INFO, logger="durably")
    async with app:
        abandoned = await job.start(1)
        if queued:  # claimed by a worker that died at once: its lease runs out
            claims = QueueClaims(app.store)
            await claims.declare([q]) if q else None
            taken = await claims.claim("jobs", "W-dead", [("job", "v1")], 1, 0.2)
        else:
            taken = await app.store.claim("W-dead", [("job", "v1")], 1, 0.2)
        assert [r["id"] for r in taken] == [abandoned.run_id]
        fresh = await job.start(2)
        worker = app.worker(worker_id="W2", lease="5s", poll_interval="50ms")
        task = asyncio.create_task(worker.run(install_signals=False))
        try:
            assert await abandoned.result(timeout=scaled(10)) == 2
            assert await fresh.result(timeout=scaled(10)) == 4
        finally:
            worker.stop()
            await task
    takeovers = [r for r in caplog.records if "taken over" in r.getMessage()]
    assert len(takeovers) == 1, [r.getMessage() for r in takeovers]
    assert takeovers[0].levelno == logging.INFO
    assert abandoned.run_id in takeovers[0].getMessage()
    assert "W-dead" in takeovers[0].getMessage()


class Order(BaseModel):
    id: str
    currency: str


async def _forgotten() -> int:
    return 1


async def test_a_failure_no_policy_retries_does_not_log_retrying(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = Durably(db_url)
    made: list[Coroutine[Any, Any, int]] = []

    def forgetful() -> Any:
        made.append(_forgotten())  # closed at the end: no "never awaited" warning later
        return made[-1]

    @app.workflow(name="priced", retry=THRICE)
    async def priced(ctx: Any, order: Order) -> str:
        return order.id

    @app.workflow(name="forgot", retry=THRICE)
    async def forgot(ctx: Any) -> Any:
        return await ctx.step.run("a", forgetful)  # the body forgot an await

    @app.workflow(name="flaky", retry=THRICE)
    async def flaky(ctx: Any) -> Any:
        raise RuntimeError("try again")  # retried by policy: logged as such

    caplog.set_level(logging.INFO, logger="durably")
    async with app, app.worker(poll_interval="50ms"):
        # An input the model no longer accepts (a required field added since the start).
        old, _ = await app.create_run(NewRun("priced", "v1", '{"id": "o1"}', 3))
        misused = [app.handle(old.run_id), await forgot.start()]
        retried = await flaky.start()
        for handle in misused:
            run = await handle.wait(timeout=scaled(10))
            assert run.status == "failed" and run.attempts == 1, run
            assert not _lines(caplog, handle.run_id, "retrying")
        assert (await retried.wait(timeout=scaled(10))).attempts == 3
        await eventually(lambda: len(_lines(caplog, retried.run_id, "retrying")) == 2,
                         what="the retried run's two retries logged")  # fmt: skip
    for coro in made:
        coro.close()
