"""A signal wait ends with the workflow attempt that began it: a signal sent while a retried
run is between attempts, or while its failing attempt's waits are ending, is received by the
next attempt, never by a wait nobody will read again (§4.3: a signal is never lost, and a
send never reports a delivery that did not happen; §4.14: nothing of an attempt that ended
is left `running`)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from durably import Durably, RetryPolicy, RunHandle, StepContext, Workflow
from tests.helpers import duration, eventually, scaled

ONCE = RetryPolicy(max_attempts=1)
TWICE = RetryPolicy(max_attempts=2, initial_interval="10ms")
BUFFERED = {"delivered_to": [], "buffered": True, "duplicate": False}


@pytest.mark.parametrize("fault", ["step", "code"])
async def test_a_signal_sent_between_attempts_reaches_the_retry(db_url: str, fault: str) -> None:
    """Attempt 1 waits for "go" and "poke"; once "poke" arrives it fails: a step fails for
    good (`step`: the waits are the claim's own), or the workflow code raises before it
    reaches the waits an earlier claim of the attempt recorded (`code`: something outside
    the log changed, a deploy say). "go" is sent while the run waits for its retry (two
    seconds): no wait of attempt 1's is left running to take it, it is buffered, and
    attempt 2 receives it, and "poke" too (given back to the run)."""
    app = Durably(db_url)
    faults: list[str] = []  # the workflow's next claim raises, outside any step
    checks: list[int] = []

    def check() -> None:
        checks.append(1)
        if fault == "step" and len(checks) == 1:
            raise RuntimeError("check is down")

    later = RetryPolicy(max_attempts=2, initial_interval=duration(2))

    @app.workflow(name="flaky", version="v1", retry=later)
    async def flaky(ctx: Any) -> list[Any]:
        if faults:
            raise RuntimeError(faults.pop())
        go = ctx.step.wait_for_signal("go", timeout=duration(6))
        poke = await ctx.step.wait_for_signal("poke", timeout=duration(6))
        await ctx.step.run("check", check, retry=ONCE)
        return [await go, poke]

    async with app, app.worker():
        handle = await flaky.start()
        await eventually(lambda: _is(handle, "waiting"), what="both waits")
        if fault == "code":
            faults.append("a fault outside any step")
        assert (await app.send_signal("poke", "poked"))["delivered_to"] == [handle.run_id]
        await eventually(lambda: _between_attempts(handle), what="the retry")
        left = [s for s in await app.list_steps(handle.run_id) if s.status == "running"]
        sent = await app.send_signal("go", "between")
        result = await handle.result(timeout=scaled(15))
        assert left == [], "attempt 1's waits were left running"
        assert sent == BUFFERED, "attempt 1's wait took the signal"
        assert result == ["between", "poked"]
        assert (await handle.get()).attempts == 2
        assert await app.list_signals(pending=True) == []


async def _between_attempts(handle: RunHandle[Any]) -> bool:
    run = await handle.get()
    return run.status == "pending" and run.attempts == 2


async def test_a_signal_sent_as_the_failing_attempts_wait_ends_reaches_the_retry(
    pg_url: str,
) -> None:
    """PostgreSQL: the send reads the wait as running, and reaches its row just after the
    failing attempt ended it (held here, by a trigger, until the send waits for that row).
    The signal is buffered, and attempt 2 receives it."""
    app = Durably(pg_url)
    fails = retried_beside_a_wait(app, duration(3))

    async with app, await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        handle = await fails.start()  # the schema exists from here on
        await conn.execute(_HOLD_WAIT_END)
        await conn.execute("SELECT pg_advisory_lock(8128, 1)")
        async with app.worker():
            await eventually(lambda: _waiting(conn, "advisory"), what="the wait's end")
            send = asyncio.create_task(app.send_signal("go", "y"))
            await eventually(lambda: _waiting(conn, SEND), what="the send")
            await conn.execute("SELECT pg_advisory_unlock(8128, 1)")
            assert await send == BUFFERED
            assert await handle.result(timeout=scaled(10)) == "y"
            assert (await handle.get()).attempts == 2
            assert await app.list_signals(pending=True) == []


def retried_beside_a_wait(app: Durably, wait_timeout: str) -> Workflow[Any, Any]:
    """Workflow "fails": it waits for "go" beside a step that fails its first attempt for
    good once the wait is recorded running, so the run is retried (twice at most)."""
    calls: list[int] = []

    async def fails_once(ctx: StepContext) -> None:
        calls.append(1)
        if len(calls) == 1:
            await eventually(lambda: _wait_running(app, ctx.fence.run_id), what="the wait")
            raise RuntimeError("down")

    @app.workflow(name="fails", version="v1", retry=TWICE)
    async def fails(ctx: Any) -> Any:
        go = ctx.step.wait_for_signal("go", timeout=wait_timeout)
        await ctx.step.run("fails-once", fails_once, retry=ONCE)
        return await go

    return fails


SEND = "SELECT delivered_to, buffered, notified FROM"  # send_signal's statement

# The transaction that ends a signal wait (status `running` to anything else) waits, before
# it commits, for advisory lock (8128, 1), which the test holds.
_HOLD_WAIT_END = """
CREATE FUNCTION durably.hold_wait_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(8128, 1);
    RETURN NULL;
END $$;
CREATE TRIGGER hold_wait_end AFTER UPDATE ON durably.step_attempts FOR EACH ROW
WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND NEW.kind = 'signal-wait')
EXECUTE FUNCTION durably.hold_wait_end();
"""


async def _waiting(conn: psycopg.AsyncConnection[Any], what: str) -> bool:
    """Whether a session of this database waits for a lock: the test's advisory lock, or
    (its statement starting with `what`: `send_signal`'s, say) a row."""
    if what == "advisory":
        cur = await conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 8128 "
            "AND objid = 1 AND objsubid = 2 AND NOT granted"
        )
    else:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND starts_with(query, %s)",
            (what,),
        )
    row = await cur.fetchone()
    return row is not None and row[0] > 0


async def _wait_running(app: Durably, run_id: str) -> bool:
    steps = await app.list_steps(run_id)
    return any(s.kind == "signal-wait" and s.status == "running" for s in steps)


async def _is(handle: RunHandle[Any], status: str) -> bool:
    return (await handle.get()).status == status
