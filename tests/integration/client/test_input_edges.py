"""Input at the engine's edges, on both backends: durations too long to add to a time and
blank signal names are refused where they are written, with `InvalidInput`, before
anything is stored; in workflow code they fail the run through its normal failure path."""

from __future__ import annotations

from typing import Any

import pytest

from durably import Durably, InvalidInput
from tests.helpers import scaled


async def test_a_sleep_too_long_to_add_to_now_fails_its_run_naming_the_step(db_url: str) -> None:
    app = Durably(db_url)
    undone: list[str] = []

    @app.workflow(name="napper", version="v1")
    async def napper(ctx: Any, duration: str) -> None:
        await ctx.step.run("charge", lambda: "charged", compensate=undone.append)
        await ctx.step.sleep("nap", duration)

    async with app, app.worker():
        # the first overflowed timedelta in the workflow, the second the wake-up time
        for duration in ("9999999999d", "999999999d"):
            run = await (await napper.start(duration)).wait(timeout=scaled(10))
            assert run.status == "failed" and run.error is not None
            assert run.error["type"] == "InvalidInput", run.error
            assert "step 'nap'" in run.error["message"]
            assert "1000 years" in run.error["message"]
    assert undone == ["charged", "charged"]  # the normal failure path: compensations ran


async def test_other_durations_in_workflow_code_fail_their_run_naming_them(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="waits", version="v1")
    async def waits(ctx: Any, which: str) -> None:
        if which == "signal":
            await ctx.step.wait_for_signal("go", timeout="99999999999d")
        elif which == "expires":
            await ctx.step.send_signal("go", expires="99999999999d")
        else:
            await ctx.step.run("work", lambda: 1, timeout="99999999999d")

    async with app, app.worker():
        for which, named in [("signal", "signal 'go'"), ("expires", "signal 'go'"),
                             ("step", "step 'work'")]:  # fmt: skip
            run = await (await waits.start(which)).wait(timeout=scaled(10))
            assert run.error is not None and run.error["type"] == "InvalidInput", run.error
            assert named in run.error["message"]
        assert await app.list_signals(pending=False) == []


async def test_oversized_client_durations_are_invalid_input_and_write_nothing(
    db_url: str,
) -> None:
    app = Durably(db_url)

    @app.workflow(name="noop", version="v1")
    async def noop(ctx: Any) -> None:
        return None

    async with app:
        with pytest.raises(InvalidInput):
            await app.send_signal("go", expires="99999999999d")
        with pytest.raises(InvalidInput):
            await noop.start(available_at="+99999999999d")
        with pytest.raises(InvalidInput):
            await app.purge(older_than="99999999999d")
        assert await app.list_signals(pending=False) == []
        assert await app.list_runs() == []


@pytest.mark.parametrize("name", ["", "   ", "\t\n"])
async def test_a_blank_signal_name_is_refused_and_nothing_is_stored(db_url: str, name: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="blank", version="v1")
    async def blank(ctx: Any, which: str) -> None:
        if which == "send":
            await ctx.step.send_signal(name, {"x": 1})
        else:
            await ctx.step.wait_for_signal(name, timeout="1s")

    async with app:
        with pytest.raises(InvalidInput, match="a signal needs a name"):
            await app.send_signal(name, {"x": 1})
        async with app.worker():
            for which in ("send", "wait"):
                run = await (await blank.start(which)).wait(timeout=scaled(10))
                assert run.status == "failed" and run.error is not None
                assert run.error["type"] == "InvalidInput", run.error
                assert "a signal needs a name" in run.error["message"]
                assert [s.kind for s in await app.list_steps(run.run_id)] == []
        assert await app.list_signals(pending=False) == []
