"""`ctx.now()`, `ctx.random()`, `ctx.uuid4()` (issue 31 item 5), on both backends, async
and sync workflows: each returns at once, is recorded as a step of kind "value", and a
replay returns exactly what the first execution read; the value is durable before a step
issued after it starts; misuse fails loudly; and the non-determinism error names them as
the fix for time and randomness read in workflow code."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durably import Durably, StepContext, SyncWorkflowContext, WorkflowContext
from durably.testing import replay
from tests.helpers import AppThread, eventually, scaled

T = TypeVar("T")
VALUE_OPS = ("now", "random", "uuid4")
OPS = st.lists(st.sampled_from([*VALUE_OPS, "step", "nap"]), max_size=8)


def _shown(value: datetime | float | uuid.UUID) -> str:
    """A value read, as the test compares it (exactly: every digit of a float)."""
    if isinstance(value, datetime):
        assert value.tzinfo is UTC, value
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        assert value.version == 4, value
        return str(value)
    assert 0.0 <= value < 1.0, value
    return repr(value)


def _values_app(url: str, seen: dict[str, list[list[str]]]) -> Durably:
    """Workflows that read values between steps and naps (each nap parks the run: the next
    claim replays all of it), then read one more just before returning them."""
    app = Durably(url)

    def echo(value: str) -> str:
        return value

    @app.workflow(name="values", version="v1")
    async def values(ctx: WorkflowContext, ops: list[str]) -> list[str]:
        got: list[str] = []
        seen.setdefault(ctx.run_id, []).append(got)
        for i, op in enumerate(ops):
            if op in VALUE_OPS:
                got.append(_shown(getattr(ctx, op)()))
            elif op == "step":  # a step that depends on what was read
                await ctx.step.run(f"echo-{i}", echo, got[-1] if got else "")
            else:
                await ctx.step.sleep(f"nap-{i}", "1ms")
        await ctx.step.sleep("end-nap", "200ms")
        got.append(_shown(ctx.random()))  # read, then returned: the end records it
        return got

    @app.workflow(name="values-sync", version="v1")
    def values_sync(ctx: SyncWorkflowContext, ops: list[str]) -> list[str]:
        got: list[str] = []
        seen.setdefault(ctx.run_id, []).append(got)
        for i, op in enumerate(ops):
            if op in VALUE_OPS:
                got.append(_shown(getattr(ctx, op)()))
            elif op == "step":
                ctx.step.run(f"echo-{i}", echo, got[-1] if got else "")
            else:
                ctx.step.sleep(f"nap-{i}", "1ms")
        ctx.step.sleep("end-nap", "200ms")
        got.append(_shown(ctx.random()))
        return got

    return app


class _Engine(AppThread):
    """The values app in a thread (hypothesis runs each example as a plain call)."""

    def __init__(self, url: str) -> None:
        self.seen: dict[str, list[list[str]]] = {}
        super().__init__(_values_app(url, self.seen))


@pytest.fixture
def engine(db_url: str) -> Iterator[_Engine]:
    with _Engine(db_url) as running:
        yield running


async def _run_values(app: Durably, workflow: str, ops: list[str]) -> dict[str, Any]:
    handle = await app.start(workflow, ops)
    output = await handle.result(timeout=scaled(30))
    run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
    history = {"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}
    return {"run_id": handle.run_id, "output": output, "steps": steps,
            "history": json.dumps(history, default=str)}  # fmt: skip


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, sync=st.booleans())
def test_values_read_live_are_replayed_exactly(engine: _Engine, ops: list[str], sync: bool) -> None:
    done = engine.run(_run_values(engine.app, "values-sync" if sync else "values", ops))
    output, executions = done["output"], engine.seen[done["run_id"]]
    assert len(output) == sum(op in VALUE_OPS for op in ops) + 1
    assert len(executions) >= 2  # the end-nap parked it: the last claim replayed all of it
    for execution in executions:  # each claim replays what the claims before it read
        assert execution == output[: len(execution)], (execution, output)
    assert executions[-1] == output
    recorded = [s for s in done["steps"] if s.kind == "value"]
    assert [s.step for s in recorded] == [op for op in ops if op in VALUE_OPS] + ["random"]
    assert all(s.status == "completed" and s.attempt == 1 for s in recorded)
    stored = [_shown(float(s.output)) if s.step == "random" else s.output for s in recorded]
    assert stored == output
    report = replay(engine.app, done["history"])  # the exported history, in no worker
    assert report.finished and report.output == output and not report.output_changed


@pytest.mark.parametrize("after", [False, True], ids=["first", "after-a-step"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_value_is_durable_before_a_step_issued_after_it_starts(
    db_url: str, sync: bool, after: bool
) -> None:
    """Read first, or right after a step's result (then it rides in that result's
    statement, see below): committed before the next step's body starts."""
    app = Durably(db_url)
    started = asyncio.Event()
    release = threading.Event()
    got: list[str] = []

    def effect(ctx: StepContext, token: str) -> str:
        got.append(token)
        app_loop.call_soon_threadsafe(started.set)
        release.wait(scaled(20))
        return token

    @app.workflow(name="effect", version="v1")
    async def with_effect(ctx: WorkflowContext) -> str:
        if after:
            await ctx.step.run("before", str, "x")
        token = str(ctx.uuid4())
        return await ctx.step.run("effect", effect, token)

    @app.workflow(name="effect-sync", version="v1")
    def with_effect_sync(ctx: SyncWorkflowContext) -> str:
        if after:
            ctx.step.run("before", str, "x")
        token = str(ctx.uuid4())
        return ctx.step.run("effect", effect, token)

    app_loop = asyncio.get_running_loop()
    async with app, app.worker():
        handle = await (with_effect_sync if sync else with_effect).start()
        try:
            await asyncio.wait_for(started.wait(), scaled(20))
            steps = await app.list_steps(handle.run_id)  # another connection: committed
        finally:
            release.set()
        assert await handle.result(timeout=scaled(20)) == got[0]
    values = [(s.step, s.status, s.output) for s in steps if s.kind == "value"]
    assert values == [("uuid4", "completed", got[0])], steps


@pytest.mark.parametrize("body", ["async", "thread"])
async def test_a_value_read_inside_a_step_body_fails_the_run(db_url: str, body: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="misuse", version="v1")
    async def misuse(ctx: WorkflowContext) -> None:
        async def in_loop() -> float:
            return ctx.random()

        def in_thread() -> float:
            return ctx.random()

        await ctx.step.run("reads", in_loop if body == "async" else in_thread)

    async with app, app.worker():
        run = await (await misuse.start()).wait(timeout=scaled(20))
    assert run.status == "failed" and run.error is not None, run
    assert run.error["type"] == "WorkflowMisuseError", run.error
    assert "from inside a step body" in run.error["message"]


async def test_time_read_outside_ctx_now_is_named_as_the_usual_cause(db_url: str) -> None:
    """The run read `ctx.now()` first; the code now branches on `random.random()` there:
    the error names the value step and points to ctx.now/random/uuid4."""
    app = Durably(db_url)

    @app.workflow(name="stamp", version="v1")
    async def stamp(ctx: WorkflowContext) -> None:
        ctx.now()
        await ctx.step.wait_for_signal("go")

    async with app, app.worker():
        handle = await stamp.start()
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the wait")

    changed = Durably(db_url)

    @changed.workflow(name="stamp", version="v1")
    async def stamp_changed(ctx: WorkflowContext) -> None:
        if random.random() < 2:  # the mistake: randomness outside ctx
            await ctx.step.run("late", lambda: None)
        await ctx.step.wait_for_signal("go")

    async with changed, changed.worker():
        await changed.send_signal("go")
        await eventually(lambda: _status(changed, handle.run_id, "held"), what="the hold")
        run = await changed.get_run(handle.run_id)
    error = run.error or {}
    assert error.get("type") == "NonDeterminismError", run
    assert "history has value step 'now'" in error["message"], error
    assert "function step 'late'" in error["message"], error
    assert "The usual cause is time, randomness or I/O in workflow code" in error["message"]
    assert "ctx.now(), ctx.random(), ctx.uuid4()" in error["message"], error


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_values_ride_with_the_records_of_the_pass_that_read_them(
    db_url: str, sync: bool
) -> None:
    """Values read right after a step's result arrived go in that result's statement: no
    round trip of their own before the next step starts (they cannot go later than it, nor
    in a statement of their own beside it, which might commit first)."""
    app = Durably(db_url)
    statements: list[list[str]] = []
    original = app.store.steps.record_many

    async def record_many(worker_id: str, batch: list[Any]) -> Any:
        statements.append([step.name for _, step in batch])
        return await original(worker_id, batch)

    app.store.steps.record_many = record_many  # type: ignore[method-assign,assignment]

    def echo(value: str) -> str:
        return value

    @app.workflow(name="ride", version="v1")
    async def ride(ctx: WorkflowContext) -> str:
        await ctx.step.run("a", echo, "a")
        token = f"{ctx.now().isoformat()} {ctx.uuid4()}"
        await ctx.step.run("b", echo, token)
        await ctx.step.sleep("nap", "1ms")
        return token

    @app.workflow(name="ride-sync", version="v1")
    def ride_sync(ctx: SyncWorkflowContext) -> str:
        ctx.step.run("a", echo, "a")
        token = f"{ctx.now().isoformat()} {ctx.uuid4()}"
        ctx.step.run("b", echo, token)
        ctx.step.sleep("nap", "1ms")
        return token

    async with app, app.worker():
        handle = await (ride_sync if sync else ride).start()
        token = await handle.result(timeout=scaled(20))
        steps = await _steps(app, handle.run_id)
    assert steps["b"] == token and token.split()[1] == steps["uuid4"]
    assert ["a", "now", "uuid4"] in statements, statements
    assert not [s for s in statements if "now" in s and s != ["a", "now", "uuid4"]], statements


async def test_a_value_read_beside_a_patch_marker_goes_after_it(db_url: str) -> None:
    """A patch marker issued just before a value is not durable yet when the value is
    sent: the value waits for it (durable without it, a replay would find history past the
    marker's position without it), and both replay."""
    app = Durably(db_url)
    seen: list[list[Any]] = []

    async def stamp(ctx: WorkflowContext) -> str:
        return ctx.now().isoformat()

    @app.workflow(name="beside", version="v1")
    async def beside(ctx: WorkflowContext) -> list[Any]:
        got = list(await asyncio.gather(ctx.patched("p"), stamp(ctx)))
        seen.append(got)
        await ctx.step.wait_for_signal(f"end:{ctx.run_id}")
        return got

    async with app, app.worker():
        handle = await beside.start()
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the wait")
        await app.send_signal(f"end:{handle.run_id}")
        output = await handle.result(timeout=scaled(20))
        steps = await app.list_steps(handle.run_id)
    assert seen == [output, output] and output[0] is True
    assert [(s.position, s.kind) for s in steps] == [(1, "patch"), (2, "value"), (3, "signal-wait")]
    assert steps[0].seq is not None and steps[1].seq is not None
    assert steps[0].seq < steps[1].seq


async def _steps(app: Durably, run_id: str) -> dict[str, Any]:
    return {s.step: s.output for s in await app.list_steps(run_id) if s.status == "completed"}


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status
