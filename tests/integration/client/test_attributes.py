"""Search attributes (SPEC §4.24), on both backends: given at start, merged by the run's
code once (replays write nothing), matched by `list_runs(attributes=...)` with the other
filters, carried by continue-as-new, refused when they are not flat scalars."""

from __future__ import annotations

from typing import Any

import pytest

from durably import Durably, InvalidInput
from tests.helpers import scaled


async def test_start_attributes_are_stored_shown_and_matched_key_by_key(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="order", version="v1")
    async def order(ctx: Any, n: int) -> int:
        return n

    async with app:
        a = await order.start(1, attributes={"customer": "c-1", "amount": 30, "vip": True})
        b = await order.start(2, attributes={"customer": "c-1", "amount": 12.5})
        c = await order.start(3, attributes={"customer": "c-2", "amount": 30.0, "vip": 1})
        plain = await order.start(4)
        run = await app.get_run(a.run_id)
        assert run.attributes == {"customer": "c-1", "amount": 30, "vip": True}
        assert run.to_dict()["attributes"] == run.attributes
        assert "attributes" not in (await app.get_run(plain.run_id)).to_dict()  # where set

        async def ids(**filters: Any) -> list[str]:
            return [r.run_id for r in await app.list_runs(**filters)]

        assert await ids(attributes={"customer": "c-1"}) == [b.run_id, a.run_id]
        assert await ids(attributes={"customer": "c-1", "amount": 30}) == [a.run_id]
        # Numbers by value; a bool matches a bool only, a string a string only.
        assert await ids(attributes={"amount": 30.0}) == [c.run_id, a.run_id]
        assert await ids(attributes={"vip": True}) == [a.run_id]
        assert await ids(attributes={"vip": 1}) == [c.run_id]
        assert await ids(attributes={"amount": "30"}) == []
        assert await ids(attributes={"nobody": "x"}) == []
        assert await ids(attributes={"customer": "c-1"}, limit=1) == [b.run_id]
        assert await ids(attributes={"customer": "c-1"}, status="completed") == []
        assert await ids(attributes={"customer": "c-1"}, workflow="other") == []
        assert len(await ids(attributes={})) == 4  # no filter


async def test_the_code_merges_attributes_once_and_replays_write_nothing(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="ship", version="v1")
    async def ship(ctx: Any) -> str:
        await ctx.step.set_attributes({"stage": "packed", "boxes": 2})
        await ctx.step.run("pack", lambda: None)
        await ctx.step.sleep("nap", "1ms")  # the run parks: the code is replayed after
        await ctx.step.set_attributes({"stage": "shipped"})
        return "ok"

    async with app:
        handle = await ship.start(attributes={"customer": "c-9", "stage": "new"})
        async with app.worker():
            assert await handle.result(timeout=scaled(10)) == "ok"
        run = await app.get_run(handle.run_id)
        assert run.attributes == {"customer": "c-9", "stage": "shipped", "boxes": 2}
        steps = [(s.step, s.kind, s.output) for s in await app.list_steps(handle.run_id)]
        assert [s for s in steps if s[1] == "attributes"] == [
            ("set_attributes", "attributes", {"stage": "packed", "boxes": 2}),
            ("set_attributes", "attributes", {"stage": "shipped"}),
        ]  # the replay after the sleep recorded nothing new
        found = await app.list_runs(attributes={"stage": "shipped", "customer": "c-9"})
        assert [r.run_id for r in found] == [handle.run_id]
        assert await app.list_runs(attributes={"stage": "new"}) == []
        # A fork carries them as they are (its copied steps replay, they set nothing).
        forked = await app.fork(handle.run_id, from_position=2)
        assert (await app.get_run(forked.run_id)).attributes == run.attributes
        # A purge takes them with the runs (SQLite: its attribute rows, by CASCADE).
        await app.cancel(forked.run_id)
        assert (await app.purge(older_than="0s"))["runs"] == 2
        assert await app.list_runs(attributes={"customer": "c-9"}) == []


def test_a_sync_workflow_and_the_sync_facade(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="tag", version="v1")
    def tag(ctx: Any, label: str) -> str:
        ctx.step.set_attributes({"label": label})
        return label

    handle = app.sync.start("tag", "blue", attributes={"origin": "sync"})

    async def work() -> None:
        async with app.worker():
            await app.handle(handle.run_id).wait(timeout=scaled(10))

    app.sync.run(work())
    [run] = app.sync.list_runs(attributes={"origin": "sync", "label": "blue"})
    assert (run.run_id, run.attributes) == (handle.run_id, {"origin": "sync", "label": "blue"})
    app.sync.close()


async def test_continue_as_new_carries_the_attributes_over(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="loop", version="v1")
    async def loop(ctx: Any, n: int) -> int:
        await ctx.step.set_attributes({"round": n})
        if n < 2:
            ctx.continue_as_new(n + 1)
        return n

    async with app:
        handle = await loop.start(0, attributes={"tenant": "t-1"})
        async with app.worker():
            assert await handle.result(timeout=scaled(10)) == 2
        runs = await app.list_runs(attributes={"tenant": "t-1"})
        assert sorted(r.attributes["round"] for r in runs) == [0, 1, 2]
        last = [r for r in runs if r.status == "completed"]
        assert [r.attributes for r in last] == [{"tenant": "t-1", "round": 2}]


@pytest.mark.parametrize(
    "bad",
    [
        {"": 1},
        {"k" * 129: 1},
        {"k": None},
        {"k": [1]},
        {"k": {"a": 1}},
        {"k": float("nan")},
        {"k": 1 << 63},
        {"k": "x" * 1025},
        {1: "x"},
        {f"k{i}": i for i in range(65)},
        ["k", 1],
    ],
)
async def test_bad_attributes_are_refused_and_nothing_is_written(db_url: str, bad: Any) -> None:
    app = Durably(db_url)

    @app.workflow(name="w", version="v1")
    async def w(ctx: Any) -> None:
        return None

    async with app:
        with pytest.raises(InvalidInput):
            await w.start(attributes=bad)
        with pytest.raises(InvalidInput):
            await app.list_runs(attributes=bad)
        assert await app.list_runs() == []


async def test_bad_attributes_in_the_code_fail_before_anything_is_issued(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="w", version="v1")
    async def w(ctx: Any) -> str:
        try:
            await ctx.step.set_attributes({"k": [1]})
        except InvalidInput as exc:
            return str(exc)
        return "taken"

    async with app:
        handle = await w.start()
        async with app.worker():
            assert "str, int, float or bool" in await handle.result(timeout=scaled(10))
        assert [s.kind for s in await app.list_steps(handle.run_id)] == []
