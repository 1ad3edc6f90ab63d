"""`ctx.step.wait_for_signal(name, type=T)` validates the data into `T` (a pydantic model, a
dataclass, a TypedDict, a builtin: anything pydantic's TypeAdapter takes) and a replay
returns an equal value; data that does not fit fails at the wait with `InvalidInput` naming
the signal and the field; a timeout (None, or `default=`) is told apart from a signal whose
data is null; `handle.signal()` sends to that run only (issue 31 item 7), on both backends."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

from durably import (
    Durably,
    RetryPolicy,
    RunHandle,
    RunTerminalError,
    SyncWorkflowContext,
    WorkflowContext,
)
from durably.testing import replay
from tests.helpers import eventually, scaled


class Approval(BaseModel):
    approved: bool
    by: str


@dataclass
class Point:
    x: int
    y: int


class Vote(TypedDict):
    choice: str


TYPES: dict[str, Any] = {
    "model": (Approval, {"approved": True, "by": "ana"}),
    "dataclass": (Point, {"x": 1, "y": 2}),
    "typeddict": (Vote, {"choice": "yes"}),
    "int": (int, 7),
    "list": (list[int], [1, 2]),
    "optional": (Approval | None, None),
}


def _app(url: str, seen: dict[str, list[Any]]) -> Durably:
    """`typed` waits for signal `go:<run id>` with the type its input names (and a timeout
    and default when given), then for `end:<run id>` (`_replayed` sends it once the run
    parked there): the next claim replays the first wait. `seen` keeps what each
    execution of a run received."""
    app = Durably(url)

    @app.workflow(name="typed", version="v1")
    async def typed(ctx: WorkflowContext, spec: dict[str, Any]) -> str:
        options = {k: spec[k] for k in ("timeout", "default") if k in spec}
        kind = TYPES[spec["type"]][0] if "type" in spec else None
        if kind is None:
            got = await ctx.step.wait_for_signal(f"go:{ctx.run_id}", **options)
        else:
            got = await ctx.step.wait_for_signal(f"go:{ctx.run_id}", type=kind, **options)
        seen.setdefault(ctx.run_id, []).append(got)
        await ctx.step.wait_for_signal(f"end:{ctx.run_id}")
        return repr(got)

    @app.workflow(name="typed-sync", version="v1")
    def typed_sync(ctx: SyncWorkflowContext, spec: dict[str, Any]) -> str:
        got = ctx.step.wait_for_signal(f"go:{ctx.run_id}", type=TYPES[spec["type"]][0])
        seen.setdefault(ctx.run_id, []).append(got)
        ctx.step.wait_for_signal(f"end:{ctx.run_id}")
        return repr(got)

    return app


async def _waiting(app: Durably, handle: RunHandle[Any], on: str = "go") -> None:
    label = f"signal:{on}:{handle.run_id}"

    async def check() -> bool:
        run = await handle.get()
        return run.status == "waiting" and run.waiting_for == label

    await eventually(check, what=f"run {handle.run_id} waiting for {label}")


async def _replayed(app: Durably, handle: RunHandle[Any]) -> str:
    """Let `typed` end once it parked after its first wait; its output."""
    await _waiting(app, handle, "end")
    await handle.signal(f"end:{handle.run_id}")
    output: str = await handle.result(timeout=scaled(20))
    return output


@pytest.mark.parametrize("kind", sorted(TYPES))
@pytest.mark.parametrize("workflow", ["typed", "typed-sync"])
async def test_the_data_is_validated_into_the_type_and_replayed_equal(
    db_url: str, kind: str, workflow: str
) -> None:
    seen: dict[str, list[Any]] = {}
    app = _app(db_url, seen)
    annotation, data = TYPES[kind]
    async with app, app.worker():
        handle = await app.start(workflow, {"type": kind})
        await _waiting(app, handle)
        await handle.signal(f"go:{handle.run_id}", data)
        output = await _replayed(app, handle)
        [wait] = [s for s in await app.list_steps(handle.run_id) if s.step.startswith("go:")]
    live, replayed = seen[handle.run_id]  # the claim after the park replayed the wait
    assert live == replayed and repr(live) == output
    if kind in ("model", "dataclass"):
        assert type(live) is annotation and type(replayed) is annotation
        assert live is not replayed
    assert wait.output == data  # stored as sent, validated where it is received


async def test_data_that_does_not_fit_fails_at_the_wait_naming_the_field(db_url: str) -> None:
    app = _app(db_url, {})
    async with app, app.worker():
        handle = await app.start("typed", {"type": "model"})
        await _waiting(app, handle)
        await handle.signal(f"go:{handle.run_id}", {"approved": "maybe", "by": "ana"})
        run = await handle.wait(timeout=scaled(20))
    assert run.status == "failed" and run.error is not None, run
    assert run.error["type"] == "InvalidInput", run.error
    message = run.error["message"]
    assert f"the data of signal 'go:{handle.run_id}' is invalid" in message, message
    assert "approved: Input should be a valid boolean" in message, message
    assert "in typed" in run.error.get("traceback", ""), run.error  # raised at the wait


async def test_null_data_does_not_fit_a_model(db_url: str) -> None:
    app = _app(db_url, {})
    async with app, app.worker():
        handle = await app.start("typed", {"type": "model"})
        await _waiting(app, handle)
        await handle.signal(f"go:{handle.run_id}")
        run = await handle.wait(timeout=scaled(20))
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "InvalidInput", run.error


@pytest.mark.parametrize(
    ("spec", "send", "expected"),
    [
        ({"type": "model", "timeout": "50ms"}, False, None),  # as before: None
        ({"type": "model", "timeout": "50ms", "default": "expired"}, False, "expired"),
        ({"timeout": "50ms", "default": "expired"}, False, "expired"),
        ({"timeout": "30s", "default": "expired"}, True, None),  # null data, not a timeout
        ({"type": "optional", "timeout": "30s", "default": "expired"}, True, None),
        ({"type": "optional", "timeout": "50ms", "default": "expired"}, False, "expired"),
    ],
    ids=["none", "default", "untyped-default", "null-data", "optional-null", "optional-timeout"],
)
async def test_a_timeout_is_told_from_a_signal_whose_data_is_null(
    db_url: str, spec: dict[str, Any], send: bool, expected: Any
) -> None:
    seen: dict[str, list[Any]] = {}
    app = _app(db_url, seen)
    async with app, app.worker():
        handle = await app.start("typed", spec)
        if send:
            await _waiting(app, handle)
            assert (await handle.signal(f"go:{handle.run_id}", None))["delivered_to"]
        assert await _replayed(app, handle) == repr(expected)
        steps = await app.list_steps(handle.run_id)
        run = await handle.get()
    assert seen[handle.run_id] == [expected, expected]  # live, then replayed
    [wait] = [s for s in steps if s.step.startswith("go:")]
    exported = {"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}
    report = replay(app, json.dumps(exported, default=str))  # as `durably show --json`
    assert report.finished and report.output == repr(expected), report
    assert wait.status == "completed" and wait.output is None and wait.delivered is send


async def test_handle_signal_reaches_its_run_only(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="wait-go", version="v1")
    async def wait_go(ctx: WorkflowContext, first: str) -> list[Any]:
        await ctx.step.wait_for_signal(first)  # the run waits on `first` first
        return [await ctx.step.wait_for_signal("go"), await ctx.step.wait_for_signal("go")]

    async with app, app.worker():
        one, two = await wait_go.start("one"), await wait_go.start("two")
        await eventually(lambda: _waiting_on(app, one, "signal:one"), what="one's first wait")
        await eventually(lambda: _waiting_on(app, two, "signal:two"), what="two's first wait")
        # Neither waits on "go" yet: each send is buffered for its own run.
        sent = await one.signal("go", 1, idempotency_key="k1")
        assert sent == {"delivered_to": [], "buffered": True, "duplicate": False}
        assert (await one.signal("go", 1, idempotency_key="k1"))["duplicate"]
        await two.signal("go", 2)
        await app.send_signal("one", None)
        await app.send_signal("two", None)
        await eventually(lambda: _waiting_on(app, one, "signal:go"), what="one's second wait")
        await eventually(lambda: _waiting_on(app, two, "signal:go"), what="two's second wait")
        assert (await one.signal("go", 3))["delivered_to"] == [one.run_id]
        assert (await two.signal("go", 4))["delivered_to"] == [two.run_id]
        assert await one.result(timeout=scaled(20)) == [1, 3]
        assert await two.result(timeout=scaled(20)) == [2, 4]
        with pytest.raises(RunTerminalError, match="completed"):
            await one.signal("go", 5)
        assert await app.list_signals(name="go") == []  # nothing left for another run


async def _waiting_on(app: Durably, handle: RunHandle[Any], label: str) -> bool:
    run = await handle.get()
    return run.status == "waiting" and run.waiting_for == label


async def test_a_type_that_is_no_type_is_refused_at_the_call(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="bad-type", version="v1")
    async def bad_type(ctx: WorkflowContext) -> None:
        await ctx.step.wait_for_signal("x", type=object())

    async with app, app.worker():
        run = await (await bad_type.start()).wait(timeout=scaled(20))
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "TypeError", run.error
    assert "wait_for_signal('x')" in run.error["message"], run.error


async def test_data_that_does_not_fit_spends_no_workflow_retry(db_url: str) -> None:
    """Every attempt would replay the same signal into the same error: the run fails for
    good at once, as one whose input does not fit does."""
    app = Durably(db_url)

    @app.workflow(name="retried", version="v1", retry=RetryPolicy(max_attempts=3))
    async def retried(ctx: WorkflowContext) -> Approval:
        return await ctx.step.wait_for_signal(f"go:{ctx.run_id}", type=Approval)

    async with app, app.worker():
        handle = await retried.start()
        await _waiting(app, handle)
        await handle.signal(f"go:{handle.run_id}", {"approved": "maybe"})
        run = await handle.wait(timeout=scaled(20))
    assert run.status == "failed" and run.attempts == 1, run
    assert run.error is not None and run.error["type"] == "InvalidInput", run.error
