"""A signal given back to a run's buffer keeps the expiry it was sent with (§4.18: never
delivered once expired): a workflow retry's give-back, a `wait_first` loser abandoned as
its signal arrived, and a resume of a run canceled with a signal delivered to its wait; on
both backends. Each signal is sent to expire within a millisecond: delivered at once to a
wait, then given back expired."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from durably import Durably, RetryPolicy, RunHandle, StepFailedError
from durably.store.giveback import GiveBacks
from tests.helpers import duration, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)


async def _is(handle: RunHandle[Any], status: str) -> bool:
    return (await handle.get()).status == status


async def test_a_retry_does_not_receive_again_a_signal_that_expired(db_url: str) -> None:
    app = Durably(db_url)
    calls: list[str] = []

    def body(name: str) -> str:
        calls.append(name)
        if calls.count(name) == 1:
            raise RuntimeError(f"{name} is down")
        return name

    retry = RetryPolicy(max_attempts=2, initial_interval="10ms")

    @app.workflow(name="offer", version="v1", retry=retry)
    async def offer(ctx: Any) -> Any:
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        got = await ctx.step.wait_for_signal("offer", timeout=duration(0.5))
        await ctx.step.run("charge", body, "charge", retry=ONCE)
        return got

    async with app, app.worker():
        handle = await offer.start()
        await eventually(lambda: _is(handle, "waiting"), what="the wait")
        sent = await app.send_signal("offer", {"price": 1}, expires="1ms")
        assert sent["delivered_to"] == [handle.run_id]
        # Attempt 1 fails at `charge`; its wait's signal goes back, expired: attempt 2's
        # wait times out.
        assert await handle.result(timeout=scaled(10)) is None
        assert (await handle.get()).attempts == 2


async def test_an_abandoned_wait_gives_back_its_signal_with_its_expiry(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Durably(db_url)
    original = GiveBacks.abandon_wait

    async def sent_as_abandoned(self: GiveBacks, *args: Any) -> Any:
        await app.send_signal("no", "n", expires="1ms")  # delivered to the running loser
        return await original(self, *args)

    monkeypatch.setattr(GiveBacks, "abandon_wait", sent_as_abandoned)

    @app.workflow(name="first", version="v1")
    async def first(ctx: Any) -> list[Any]:
        index, got = await ctx.wait_first(
            ctx.step.wait_for_signal("yes", timeout=duration(30)),
            ctx.step.wait_for_signal("no", timeout=duration(30)),
        )
        later = await ctx.step.wait_for_signal("no", timeout=duration(0.5))
        return [index, got, later]

    async with app, app.worker():
        handle = await first.start()
        await eventually(lambda: _is(handle, "waiting"), what="both waits")
        await app.send_signal("yes", "y")
        assert await handle.result(timeout=scaled(10)) == [0, "y", None]


async def test_a_resume_gives_back_a_delivered_signal_with_its_expiry(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="waiter", version="v1")
    async def waiter(ctx: Any) -> Any:
        return await ctx.step.wait_for_signal("go", timeout=duration(0.5))

    async with app:
        async with app.worker():
            handle = await waiter.start()
            await eventually(lambda: _is(handle, "waiting"), what="the wait")
        # No worker: the signal waits on the wait's record, unread, when the run is canceled.
        sent = await app.send_signal("go", "now", expires="1ms")
        assert sent["delivered_to"] == [handle.run_id]
        await app.cancel(handle.run_id)
        await app.resume(handle.run_id)
        async with app.worker():
            assert await handle.result(timeout=scaled(10)) is None
