"""Continue-as-new (SPEC §4.23): a run ends `continued` and the next run of its chain starts
with an empty history in the same transaction; `result()` of any run of the chain follows
it to the last one's; signals buffered for a run move with it; the idempotency key names
the chain (its newest run); a child that continues is waited for to its chain's end."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from durably import ContinueAsNew, Durably, InvalidInput, Run, RunFailedError
from tests.helpers import eventually, scaled


class Count(BaseModel):
    n: int
    total: int = 0


def _counter(app: Durably) -> Any:
    @app.workflow(name="count", version="v1")
    async def count(ctx: Any, c: Count) -> int:
        total: int = await ctx.step.run("add", lambda: c.total + c.n)
        if c.n > 1:
            ctx.continue_as_new(Count(n=c.n - 1, total=total))
        return total

    return count


async def _chain(app: Durably, first: str) -> list[Run]:
    runs = [await app.get_run(first)]
    while runs[-1].continued_as is not None:
        runs.append(await app.get_run(runs[-1].continued_as))
    return runs


async def test_a_chain_ends_with_the_last_runs_result(db_url: str) -> None:
    """50 generations: each run's history is one step; `result()` of the first run follows
    the chain to the last one's result; each link says where it came from and went."""
    app = Durably(db_url)
    count = _counter(app)
    async with app, app.worker():
        handle = await count.start(Count(n=50))
        assert await handle.result(timeout=scaled(120)) == sum(range(1, 51))
        runs = await _chain(app, handle.run_id)
        assert len(runs) == 50
        assert [r.status for r in runs] == ["continued"] * 49 + ["completed"]
        assert runs[0].output == {"continued_as": runs[1].run_id}
        assert runs[1].continued_from == runs[0].run_id and runs[0].continued_from is None
        for run in runs:
            assert len(await app.list_steps(run.run_id)) == 1  # a bounded history
        doc = runs[1].to_dict()
        assert doc["continued_as"] == runs[2].run_id
        assert doc["continued_from"] == runs[0].run_id
        assert "continued_as" not in runs[-1].to_dict()
        assert "continued_from" not in runs[0].to_dict()
        # Any run of the chain, waited on late, gives the same result.
        assert await app.handle(runs[20].run_id).result(timeout=scaled(10)) == 1275
        listed = await app.list_runs(status="continued")
        assert len(listed) == 49


async def test_a_sync_workflow_continues(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="sync-count", version="v1")
    def count(ctx: Any, n: int) -> str:
        got = ctx.step.run("got", lambda: n)
        if got > 0:
            ctx.continue_as_new(got - 1)
        return "done"

    async with app, app.worker():
        handle = await count.start(3)
        assert await handle.result(timeout=scaled(30)) == "done"
        assert len(await _chain(app, handle.run_id)) == 4


async def test_an_input_that_does_not_fit_fails_the_run(db_url: str) -> None:
    """The next input is validated as a start's: it fails the run (InvalidInput), which
    does not continue, rather than start a run that cannot run."""
    app = Durably(db_url)

    @app.workflow(name="bad", version="v1")
    async def bad(ctx: Any, c: Count) -> None:
        ctx.continue_as_new({"n": "not a number"})

    async with app, app.worker():
        handle = await bad.start(Count(n=1))
        with pytest.raises(RunFailedError) as caught:
            await handle.result(timeout=scaled(30))
        assert caught.value.status == "failed"
        assert (await handle.get()).error["type"] == InvalidInput.__name__  # type: ignore[index]
        assert (await handle.get()).continued_as is None


async def test_except_exception_does_not_swallow_it(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="swallow", version="v1")
    async def swallow(ctx: Any, n: int) -> int:
        try:
            if n < 2:
                ctx.continue_as_new(n + 1)
        except Exception:
            return -1
        return n

    async with app, app.worker():
        handle = await swallow.start(0)
        assert await handle.result(timeout=scaled(30)) == 2
    assert issubclass(ContinueAsNew, BaseException)
    assert not issubclass(ContinueAsNew, Exception)


async def test_buffered_signals_move_to_the_next_run(db_url: str) -> None:
    """Signals sent to the run (addressed) before it waits for them are buffered; the run
    continues before it reads them: the next run's wait receives them, in order."""
    app = Durably(db_url)

    @app.workflow(name="mover", version="v1")
    async def mover(ctx: Any, gen: int) -> list[Any]:
        if gen == 0:
            await ctx.step.wait_for_signal("go")
            ctx.continue_as_new(1)
        first = await ctx.step.wait_for_signal("data", timeout="30s")
        second = await ctx.step.wait_for_signal("data", timeout="30s")
        return [first, second]

    async with app, app.worker():
        handle = await mover.start(0)
        await handle.signal("data", "a")
        await handle.signal("data", "b")
        await handle.signal("go")
        assert await handle.result(timeout=scaled(30)) == ["a", "b"]


async def test_the_idempotency_key_names_the_chains_newest_run(db_url: str) -> None:
    app = Durably(db_url)
    count = _counter(app)
    async with app, app.worker():
        first = await count.start(Count(n=3), idempotency_key="k-1")
        assert await first.result(timeout=scaled(30)) == 6
        runs = await _chain(app, first.run_id)
        again = await count.start(Count(n=3), idempotency_key="k-1")
        assert again.run_id == runs[-1].run_id
        assert [r.idempotency_key for r in runs] == [None, None, "k-1"]


async def test_a_parent_waits_for_its_childs_chain(db_url: str) -> None:
    app = Durably(db_url)
    count = _counter(app)

    @app.workflow(name="parent", version="v1")
    async def parent(ctx: Any) -> int:
        return int(await ctx.step.run_workflow(count, Count(n=4), name="kid"))

    async with app, app.worker():
        handle = await parent.start()
        assert await handle.result(timeout=scaled(60)) == 10


async def test_a_signal_to_a_run_that_continued_reaches_its_chain(db_url: str) -> None:
    """A handle of the first run still signals the chain: the send follows it to the run
    that is live now (`delivered_to` names that run)."""
    app = Durably(db_url)

    @app.workflow(name="later", version="v1")
    async def later(ctx: Any, gen: int) -> Any:
        if gen == 0:
            ctx.continue_as_new(1)
        return await ctx.step.wait_for_signal("late", timeout="30s")

    async with app, app.worker():
        handle = await later.start(0)
        await eventually(lambda: _continued(app, handle.run_id), what="the continue")
        sent = await handle.signal("late", "hello")
        runs = await _chain(app, handle.run_id)
        assert sent["delivered_to"] in ([runs[-1].run_id], [])
        assert await handle.result(timeout=scaled(30)) == "hello"


async def _continued(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "continued"


async def test_a_cancel_of_a_run_that_continued_cancels_its_chain(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="endless", version="v1")
    async def endless(ctx: Any, gen: int) -> None:
        if gen == 0:
            ctx.continue_as_new(1)
        await ctx.step.sleep("forever", "1 day")

    async with app, app.worker():
        handle = await endless.start(0)
        await eventually(lambda: _continued(app, handle.run_id), what="the continue")
        canceled = await handle.cancel()
        assert canceled.status == "canceled" and canceled.continued_from == handle.run_id
        with pytest.raises(RunFailedError) as caught:
            await handle.result(timeout=scaled(30))
        assert caught.value.status == "canceled"
