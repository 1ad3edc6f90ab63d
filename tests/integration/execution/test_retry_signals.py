"""A workflow retry runs again what came after the first step that failed for good (§4.6):
a signal a wait took there goes back to the run's own buffer, so the retry's wait receives
it again without a second send (§4.3: a signal is never lost), before any signal sent
after it; on both backends."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

from durably import Durably, RetryPolicy, StepFailedError
from tests.helpers import duration, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)
TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")


async def _is(app: Durably, run_id: str, status: str, waiting_for: str = "") -> bool:
    run = await app.get_run(run_id)
    return run.status == status and waiting_for in (run.waiting_for or "")


def _first_call_fails() -> tuple[Counter[str], Any]:
    """A step body that fails the first time it runs for each name, then returns the name."""
    ran: Counter[str] = Counter()

    def body(name: str) -> str:
        ran[name] += 1
        if ran[name] == 1:
            raise RuntimeError(f"{name} is down")
        return name

    return ran, body


async def test_a_retry_receives_again_a_signal_taken_after_a_caught_failure(
    db_url: str,
) -> None:
    app = Durably(db_url)
    ran, body = _first_call_fails()

    @app.workflow(name="approval", version="v1", retry=TWICE)
    async def approval(ctx: Any) -> list[Any]:
        try:
            reserved = await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        except StepFailedError:
            reserved = "no reservation"
        got = await ctx.step.wait_for_signal(f"approve:{ctx.run_id}", timeout=duration(30))
        return [reserved, got, await ctx.step.run("charge", body, "charge", retry=ONCE)]

    async with app, app.worker():
        handle = await approval.start()
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the wait")
        sent = await app.send_signal(f"approve:{handle.run_id}", {"by": "ann"})
        assert sent["delivered_to"] == [handle.run_id]
        # Attempt 1 fails at `charge`. Attempt 2 starts from before the failed `reserve`, so
        # its wait runs again: it receives the same signal, never sent a second time.
        assert await handle.result(timeout=scaled(10)) == ["reserve", {"by": "ann"}, "charge"]
        assert (await handle.get()).attempts == 2
        assert await app.list_signals(pending=True) == []  # taken again, nothing left over
        waits = [s for s in await app.list_steps(handle.run_id) if s.kind == "signal-wait"]
        assert [s.output for s in waits] == [{"by": "ann"}, {"by": "ann"}]
        assert ran == {"reserve": 2, "charge": 2}


async def test_signals_given_back_come_before_one_sent_after_them(db_url: str) -> None:
    app = Durably(db_url)
    _, body = _first_call_fails()

    @app.workflow(name="steps", version="v1", retry=TWICE)
    async def steps(ctx: Any) -> list[Any]:
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        first = await ctx.step.wait_for_signal("go", timeout=duration(30))
        await ctx.step.wait_for_signal("proceed", timeout=duration(30))
        await ctx.step.run("charge", body, "charge", retry=ONCE)
        second = await ctx.step.wait_for_signal("go", timeout=duration(30))
        return [first, second]

    async with app, app.worker():
        assert (await app.send_signal("go", 1))["buffered"]  # taken from the buffer at once
        handle = await steps.start()
        await eventually(lambda: _is(app, handle.run_id, "waiting", "proceed"), what="wait")
        assert (await app.send_signal("go", 2))["buffered"]  # nobody waits on "go" now
        assert (await app.send_signal("proceed", None))["delivered_to"] == [handle.run_id]
        # Attempt 2 receives 1 (given back) before 2, as attempt 1 would have.
        assert await handle.result(timeout=scaled(10)) == [1, 2]
        assert (await handle.get()).attempts == 2
        assert await app.list_signals(pending=True) == []


async def test_a_retry_receives_again_the_signal_a_wait_first_took(db_url: str) -> None:
    app = Durably(db_url)
    _, body = _first_call_fails()

    @app.workflow(name="either", version="v1", retry=TWICE)
    async def either(ctx: Any) -> list[Any]:
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        won = await ctx.wait_first(
            ctx.step.wait_for_signal("yes", timeout=duration(30)),
            ctx.step.wait_for_signal("no", timeout=duration(30)),
        )
        await ctx.step.run("charge", body, "charge", retry=ONCE)
        return list(won)

    async with app, app.worker():
        handle = await either.start()
        await eventually(lambda: _is(app, handle.run_id, "waiting"), what="the waits")
        assert (await app.send_signal("no", "nope"))["delivered_to"] == [handle.run_id]
        assert await handle.result(timeout=scaled(10)) == [1, "nope"]
        assert (await handle.get()).attempts == 2
        assert await app.list_signals(pending=True) == []


async def test_a_wait_that_timed_out_gives_nothing_back(db_url: str) -> None:
    app = Durably(db_url)
    _, body = _first_call_fails()

    @app.workflow(name="impatient", version="v1", retry=TWICE)
    async def impatient(ctx: Any) -> list[Any]:
        with contextlib.suppress(StepFailedError):
            await ctx.step.run("reserve", body, "reserve", retry=ONCE)
        got = await ctx.step.wait_for_signal("never", timeout="50ms")
        return [got, await ctx.step.run("charge", body, "charge", retry=ONCE)]

    async with app, app.worker():
        handle = await impatient.start()
        assert await handle.result(timeout=scaled(10)) == [None, "charge"]
        assert (await handle.get()).attempts == 2
        assert await app.list_signals(pending=True) == []
