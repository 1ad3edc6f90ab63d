"""A signal wait that `wait_first` stopped awaiting after it had taken its signal (both
waits ended together) gives the signal back to the run, once: the workflow never received
it, so a later wait does (§4.3: a signal is never lost), even one that began while the
signal was on its way back; on both backends."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import psycopg
import pytest

from durably import Durably, RetryPolicy, RunHandle, StepContext
from durably.store.giveback import GiveBacks
from tests.helpers import duration, eventually, scaled


def _either(app: Durably) -> Any:

    @app.workflow(name="either", version="v1")
    async def either(ctx: Any) -> list[Any]:
        index, got = await _yes_or_no(ctx)
        other = "no" if index == 0 else "yes"
        await ctx.step.sleep("nap", "10ms")  # parks: the next claim replays the wait_first
        later = await ctx.step.wait_for_signal(other, timeout=duration(30))
        again = await ctx.step.wait_for_signal(other, timeout="100ms")  # given back once
        return [got, later, again]

    return either


async def test_a_loser_gives_back_the_signal_it_took_from_the_buffer(db_url: str) -> None:
    app = Durably(db_url)
    either = _either(app)
    async with app, app.worker():
        await app.send_signal("yes", "y")
        await app.send_signal("no", "n")  # both buffered: both waits take theirs at once
        handle = await either.start()
        got, later, again = await handle.result(timeout=scaled(10))
        assert sorted([got, later]) == ["n", "y"]
        assert again is None
        assert await app.list_signals(pending=True) == []


async def test_a_loser_gives_back_the_signal_delivered_with_the_winners(db_url: str) -> None:
    app = Durably(db_url)
    either = _either(app)
    async with app, app.worker():
        handle = await either.start()
        await eventually(lambda: _is(handle, "waiting"), what="both waits")
        await _send_together(app, db_url, {"yes": "y", "no": "n"})  # both delivered at once
        got, later, again = await handle.result(timeout=scaled(10))
        assert sorted([got, later]) == ["n", "y"]
        assert again is None
        assert await app.list_signals(pending=True) == []


@pytest.mark.parametrize("delay", [0.0, 0.3])
async def test_a_later_wait_receives_the_losers_signal(
    db_url: str, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    """The later wait begins (finds the buffer empty, records itself) while the loser's
    signal is still on its way back: it receives it, not the buffer."""
    if delay:  # a slow round trip for the give-back: the later wait begins first
        _slow_give_back(monkeypatch, delay)
    app = Durably(db_url)

    @app.workflow(name="either", version="v1")
    async def either(ctx: Any) -> list[Any]:
        index, got = await _yes_or_no(ctx)
        # No nap: this wait begins in the claim that gives the loser's signal back.
        later = await ctx.step.wait_for_signal("no" if index == 0 else "yes", timeout=duration(3))
        return [got, later]

    async with app, app.worker():
        handle = await either.start()
        await eventually(lambda: _is(handle, "waiting"), what="both waits")
        await _send_together(app, db_url, {"yes": "y", "no": "n"})  # both delivered at once
        got, later = await handle.result(timeout=scaled(10))
        pending = await app.list_signals(pending=True)
        assert later is not None, f"timed out; still buffered for it: {pending}"
        assert sorted([got, later]) == ["n", "y"]
        assert pending == []


@pytest.mark.parametrize("delay", [0.0, 0.3])
async def test_a_later_wait_receives_what_an_abandoned_wait_was_sent(
    db_url: str, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    """The loser is still a running wait when the workflow stops awaiting it, and its
    signal arrives as it is abandoned: the next wait on that name receives it."""
    app = Durably(db_url)
    original = GiveBacks.abandon_wait

    async def sent_as_abandoned(self: GiveBacks, *args: Any) -> Any:
        await app.send_signal("no", "n")  # delivered to the loser: still a running wait
        await asyncio.sleep(delay)  # with a delay, the later wait begins first
        return await original(self, *args)

    monkeypatch.setattr(GiveBacks, "abandon_wait", sent_as_abandoned)

    @app.workflow(name="first", version="v1")
    async def first(ctx: Any) -> list[Any]:
        index, got = await _yes_or_no(ctx)
        later = await ctx.step.wait_for_signal("no", timeout=duration(3))
        return [index, got, later]

    async with app, app.worker():
        handle = await first.start()
        await eventually(lambda: _is(handle, "waiting"), what="both waits")
        await app.send_signal("yes", "y")
        index, got, later = await handle.result(timeout=scaled(10))
        pending = await app.list_signals(pending=True)
        assert later is not None, f"timed out; still buffered for it: {pending}"
        assert [index, got, later] == [0, "y", "n"]
        assert pending == []


async def test_a_retry_receives_the_losers_signal_given_to_a_wait_of_the_failed_attempt(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser's signal reaches the later wait while the workflow attempt fails: that wait
    ends with the attempt, giving it back to the run's buffer, and the retry's wait
    receives it."""
    _slow_give_back(monkeypatch, scaled(0.3))  # the attempt fails meanwhile
    app = Durably(db_url)
    calls: list[int] = []

    async def fails_once(ctx: StepContext) -> None:
        """Fails the first time, once the later wait is recorded (it holds no signal yet)."""

        async def later_waits() -> bool:
            steps = await app.list_steps(ctx.fence.run_id)
            return any(s.kind == "signal-wait" and s.status == "running" for s in steps)

        calls.append(1)
        if len(calls) == 1:
            await eventually(later_waits, what="the later wait")
            raise RuntimeError("down")

    @app.workflow(name="either", version="v1",
                  retry=RetryPolicy(max_attempts=2, initial_interval="10ms"))  # fmt: skip
    async def either(ctx: Any) -> list[Any]:
        index, got = await _yes_or_no(ctx)
        later = ctx.step.wait_for_signal("no" if index == 0 else "yes", timeout=duration(3))
        await ctx.step.run("fails-once", fails_once, retry=RetryPolicy(max_attempts=1))
        return [got, await later]

    async with app, app.worker():
        handle = await either.start()
        await eventually(lambda: _is(handle, "waiting"), what="both waits")
        await _send_together(app, db_url, {"yes": "y", "no": "n"})
        got, later = await handle.result(timeout=scaled(10))
        pending = await app.list_signals(pending=True)
        assert later is not None, f"timed out; still buffered for it: {pending}"
        assert sorted([got, later]) == ["n", "y"]
        assert pending == []
        assert (await handle.get()).attempts == 2


def _yes_or_no(ctx: Any) -> Any:
    """Wait for whichever of "yes" and "no" comes first: (its index, its data)."""
    return ctx.wait_first(
        ctx.step.wait_for_signal("yes", timeout=duration(30)),
        ctx.step.wait_for_signal("no", timeout=duration(30)),
    )


def _slow_give_back(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    original = GiveBacks.give_back_signal

    async def slow(self: GiveBacks, *args: Any) -> Any:
        await asyncio.sleep(seconds)
        return await original(self, *args)

    monkeypatch.setattr(GiveBacks, "give_back_signal", slow)


async def _is(handle: RunHandle[Any], status: str) -> bool:
    return (await handle.get()).status == status


async def _send_together(app: Durably, db_url: str, signals: dict[str, Any]) -> None:
    """Send `signals` in one transaction of the caller's."""
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for name, data in signals.items():
                await app.send_signal(name, data, connection=conn)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    async with await psycopg.AsyncConnection.connect(db_url) as aconn, aconn.transaction():
        for name, data in signals.items():
            await app.send_signal(name, data, connection=aconn)
