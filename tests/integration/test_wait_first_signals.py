"""A signal wait that `wait_first` stopped awaiting after it had taken its signal (both
waits ended together) gives the signal back to the run's buffer, once: the workflow never
received it, so a later wait does (§4.3: a signal is never lost); on both backends."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg

from durably import Durably
from tests.helpers import duration, eventually, scaled


def _either(app: Durably) -> Any:

    @app.workflow(name="either", version="v1")
    async def either(ctx: Any) -> list[Any]:
        index, got = await ctx.wait_first(
            ctx.step.wait_for_signal("yes", timeout=duration(30)),
            ctx.step.wait_for_signal("no", timeout=duration(30)),
        )
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

        async def waiting() -> bool:
            status: str = (await handle.get()).status
            return status == "waiting"

        await eventually(waiting, what="both waits")
        await _send_together(app, db_url, {"yes": "y", "no": "n"})  # both delivered at once
        got, later, again = await handle.result(timeout=scaled(10))
        assert sorted([got, later]) == ["n", "y"]
        assert again is None
        assert await app.list_signals(pending=True) == []


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
