"""Debounced starts (SPEC §4.23, issue 29): starts with one key inside a window return
one pending run, with the latest input, started later each time up to `debounce_max`;
a claim closes the window. Both backends; the time-skipping cases are in
tests/integration/testing/test_debounce.py, the processes in tests/acceptance."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from durably import Durably, InvalidInput, WorkflowContext
from tests.helpers import eventually, scaled


class Item(BaseModel):
    n: int


def _app(url: str) -> tuple[Durably, Any]:
    app = Durably(url)

    @app.workflow(name="debounced", version="v1")
    async def debounced(ctx: WorkflowContext, item: Item) -> int:
        await ctx.step.wait_for_signal(f"go:{item.n}")
        return item.n

    return app, debounced


async def test_starts_inside_a_window_join_one_run_with_the_latest_input(db_url: str) -> None:
    app, wf = _app(db_url)

    @app.workflow(name="other", version="v1")
    async def other_wf(ctx: WorkflowContext, item: Item) -> int:
        return item.n

    async with app:
        handles = [await wf.start(Item(n=n), debounce="1h", debounce_key="user-1")
                   for n in range(4)]  # fmt: skip
        assert {h.run_id for h in handles} == {handles[0].run_id}
        assert [h.joined for h in handles] == [False, True, True, True]
        assert [h.run.input for h in handles if h.run] == [{"n": n} for n in range(4)]
        dues = [h.run.available_at for h in handles if h.run]
        assert dues == sorted(dues) and dues[0] < dues[-1]  # pushed back by each start
        run = await app.get_run(handles[0].run_id)
        assert run.status == "pending" and run.input == {"n": 3} and run.fence == 0
        assert run.debounce_key == "user-1" and run.to_dict()["debounce_key"] == "user-1"
        assert run.available_at is not None
        assert timedelta(hours=1) < run.available_at - run.created_at < timedelta(hours=1.1)
        # Another key, and another workflow with the same key, open windows of their own.
        other = await wf.start(Item(n=9), debounce="1h", debounce_key="user-2")
        assert other.run_id != handles[0].run_id and not other.joined
        same_key = await other_wf.start(Item(n=9), debounce="1h", debounce_key="user-1")
        assert same_key.run_id not in (handles[0].run_id, other.run_id) and not same_key.joined
        assert len(await app.list_runs()) == 3
        plain = await wf.start(Item(n=5))
        assert plain.run and "debounce_key" not in plain.run.to_dict()


async def test_debounce_max_caps_the_push_back(db_url: str) -> None:
    app, wf = _app(db_url)
    async with app:
        first = await wf.start(Item(n=1), debounce="1h", debounce_key="k", debounce_max="1h")
        later = await wf.start(Item(n=2), debounce="1h", debounce_key="k", debounce_max="1h")
        uncapped = await wf.start(Item(n=1), debounce="1h", debounce_key="free")
        pushed = await wf.start(Item(n=2), debounce="1h", debounce_key="free")
    assert first.run and later.run and uncapped.run and pushed.run
    assert later.run_id == first.run_id and later.joined
    # Capped at one hour after the first start: the second start cannot push it back.
    assert later.run.available_at == first.run.available_at
    assert pushed.run.available_at and uncapped.run.available_at
    assert pushed.run.available_at > uncapped.run.available_at


async def test_a_join_takes_the_latest_starts_options(db_url: str) -> None:
    app = Durably(db_url)
    keyed = app.queue("keyed", per_key=1, priority=True)

    @app.workflow(name="queued", version="v1", queue=keyed)
    async def queued(ctx: WorkflowContext, n: int) -> int:
        return n

    async with app:
        first = await queued.start(
            1, debounce="1h", debounce_key="k", concurrency_key="a", priority=1,
            deadline_at="+2h",
        )  # fmt: skip
        later = await queued.start(
            2, debounce="1h", debounce_key="k", concurrency_key="b", priority=5
        )
        run = await app.get_run(first.run_id)
        assert later.joined and run.input == 2 and run.queue == "keyed"
        assert (run.concurrency_key, run.priority, run.deadline_at) == ("b", 5, None)
        # A deadline sooner than the window's end brings the start forward to it.
        soon = await queued.start(3, debounce="1h", debounce_key="k", deadline_at="+1m")
        run = await app.get_run(first.run_id)
        assert soon.joined and run.deadline_at is not None
        assert run.available_at == run.deadline_at


async def test_a_claimed_run_closes_its_window(db_url: str) -> None:
    app, wf = _app(db_url)
    async with app, app.worker():
        first = await wf.start(Item(n=1), debounce="10ms", debounce_key="k")
        await eventually(functools.partial(_status_is, first, "waiting"), what="the claim")
        second = await wf.start(Item(n=2), debounce="10ms", debounce_key="k")
        assert second.run_id != first.run_id and not second.joined
        assert (await first.get()).input == {"n": 1}  # a claimed run's input never changes
        await app.send_signal("go:1")
        await app.send_signal("go:2")
        assert await first.result(timeout=scaled(10)) == 1
        assert await second.result(timeout=scaled(10)) == 2


async def test_concurrent_starts_with_one_key_make_one_run(db_url: str) -> None:
    app, wf = _app(db_url)
    async with app:
        handles = await asyncio.gather(
            *(wf.start(Item(n=n), debounce="1h", debounce_key="k") for n in range(20))
        )
        assert len({h.run_id for h in handles}) == 1
        assert sum(not h.joined for h in handles) == 1
        [run] = await app.list_runs()
        assert run.input in [{"n": n} for n in range(20)]


async def test_a_canceled_window_run_is_not_joined(db_url: str) -> None:
    app, wf = _app(db_url)
    async with app:
        first = await wf.start(Item(n=1), debounce="1h", debounce_key="k")
        await app.cancel(first.run_id)
        second = await wf.start(Item(n=2), debounce="1h", debounce_key="k")
        assert second.run_id != first.run_id and not second.joined


@pytest.mark.parametrize(
    "options, message",
    [
        ({"debounce": "5s"}, "debounce needs a debounce_key"),
        ({"debounce": "5s", "debounce_key": ""}, "debounce needs a debounce_key"),
        ({"debounce_key": "k"}, "debounce_key needs debounce="),
        ({"debounce_max": "1m"}, "debounce_max needs debounce="),
        ({"debounce": "0s", "debounce_key": "k"}, "positive duration"),
        ({"debounce": -5, "debounce_key": "k"}, "cannot be negative"),
        ({"debounce": "soon", "debounce_key": "k"}, "not a duration"),
        ({"debounce": "5s", "debounce_key": "k", "debounce_max": "1s"}, "at least debounce"),
        ({"debounce": "5s", "debounce_key": "k", "idempotency_key": "i"}, "not both"),
        ({"debounce": "5s", "debounce_key": "k", "available_at": "+1s"}, "no available_at"),
    ],
)
async def test_bad_debounce_options_write_nothing(
    db_url: str, options: dict[str, Any], message: str
) -> None:
    app, wf = _app(db_url)
    async with app:
        open_window = await wf.start(Item(n=1), debounce="1h", debounce_key="k")
        with pytest.raises(InvalidInput, match=message):
            await wf.start(Item(n=2), **options)
        with pytest.raises(InvalidInput, match=message):
            await app.start("debounced", {"n": 2}, **options)
        with pytest.raises(InvalidInput, match="input of workflow"):
            await wf.start({"n": "two"}, debounce="1h", debounce_key="k")
        [run] = await app.list_runs()
        assert run.run_id == open_window.run_id and run.input == {"n": 1}
        assert run.available_at == (open_window.run and open_window.run.available_at)


async def test_the_sync_facade_and_a_thin_client_debounce(db_url: str) -> None:
    app, _ = _app(db_url)
    thin = Durably(db_url)  # registers no workflow: starts by name, input as given
    try:
        first = await asyncio.to_thread(
            app.sync.start, "debounced", {"n": 1}, debounce="1h", debounce_key="k"
        )
        second = await thin.start("debounced", {"n": 2}, debounce="1h", debounce_key="k")
        assert second.run_id == first.run_id and second.joined and not first.joined
        run = await thin.get_run(first.run_id)
        assert run.input == {"n": 2} and run.version == ""  # bound by the worker's claim
        with pytest.raises(InvalidInput, match="debounce needs a debounce_key"):
            await thin.start("debounced", {"n": 3}, debounce="1h")
    finally:
        await thin.close()
        await asyncio.to_thread(app.sync.close)


async def test_a_debounced_start_in_the_callers_transaction(db_url: str) -> None:
    app, wf = _app(db_url)
    async with app:
        first = await wf.start(Item(n=1), debounce="1h", debounce_key="k")
        if db_url.startswith("sqlite"):
            conn = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
            conn.execute("BEGIN")
            joined = await wf.start(Item(n=2), debounce="1h", debounce_key="k", connection=conn)
            conn.execute("ROLLBACK")
            conn.close()
        else:
            async with (
                await psycopg.AsyncConnection.connect(db_url) as aconn,
                aconn.transaction(force_rollback=True),
            ):
                joined = await wf.start(
                    Item(n=2), debounce="1h", debounce_key="k", connection=aconn
                )
        assert joined.run_id == first.run_id and joined.joined
        assert (await first.get()).input == {"n": 1}  # rolled back with the caller's work


async def _status_is(handle: Any, status: str) -> bool:
    return bool((await handle.get()).status == status)


async def test_a_debounced_start_keeps_its_attributes_and_a_join_merges_its_own(
    db_url: str,
) -> None:
    """Search attributes (SPEC §4.24) of a debounced start are the run's, and a start that
    joins the window merges its attributes into the run's (listed by them at once)."""
    app, wf = _app(db_url)
    async with app:
        first = await wf.start(Item(n=1), debounce="1h", debounce_key="k",
                               attributes={"user": "u-1", "edits": 1})  # fmt: skip
        joined = await wf.start(Item(n=2), debounce="1h", debounce_key="k",
                                attributes={"edits": 2, "doc": "d-9"})  # fmt: skip
        assert joined.joined and joined.run_id == first.run_id
        run = await app.get_run(first.run_id)
        assert run.attributes == {"user": "u-1", "edits": 2, "doc": "d-9"}
        for wanted in ({"user": "u-1"}, {"edits": 2}, {"doc": "d-9", "user": "u-1"}):
            assert [r.run_id for r in await app.list_runs(attributes=wanted)] == [run.run_id]
        assert await app.list_runs(attributes={"edits": 1}) == []
