"""Values are exact (SPEC §4.20): what a workflow received live is what it receives on
replay, on both backends, in iteration order too; an idempotent start compares inputs by
their canonical JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from durably import Durably, FernetCodec, WorkflowContext
from durably.backends import _queries
from durably.core.codec import encode
from durably.testing import replay
from tests.helpers import AppThread, eventually, scaled

T = TypeVar("T")

# Floats JSON holds but a normalising store changes (jsonb makes 1e23 an exact integer),
# an integer beyond 64 bits, keys not in the order a normalising store sorts them.
AWKWARD: dict[str, Any] = {
    "longer-key": 1e23, "k": [5e-324, 1.7976931348623157e308, -0.0, 2**70 + 1, -(2**65)],
    "b": {"zz": "é\U0001f600", "a": None}, "": True,
}  # fmt: skip


def _seen(value: Any) -> str:
    """A value as a workflow sees it, key order included (no sort_keys)."""
    return json.dumps(value)


async def test_a_workflow_iterating_a_step_s_dict_replays_as_it_ran(db_url: str) -> None:
    app = Durably(db_url)
    executions: list[list[str]] = []

    @app.workflow(name="per-key", version="v1")
    async def per_key(ctx: WorkflowContext, _: None) -> list[str]:
        got = await ctx.step.run("read", lambda: AWKWARD)
        executions.append([_seen(got)])
        for key in got:  # one step per key, in the order the workflow received them
            await ctx.step.run(f"key:{key}", lambda: None)
        await ctx.step.sleep("nap", "10ms")  # parks: the next claim replays all of it
        return list(got)

    async with app, app.worker(concurrency=2):
        handle = await per_key.start(None)
        assert await handle.result(timeout=scaled(20)) == list(AWKWARD)
    assert len(executions) >= 2
    assert all(e == [_seen(AWKWARD)] for e in executions), executions


async def test_inputs_outputs_and_events_keep_their_text(db_url: str) -> None:
    app = Durably(db_url)
    executions: list[str] = []

    @app.workflow(name="echo", version="v1")
    async def echo(ctx: WorkflowContext, value: Any) -> Any:
        executions.append(_seen(value))
        await ctx.step.set_event("value", value)
        await ctx.step.sleep("nap", "10ms")
        return value

    async with app, app.worker(concurrency=2):
        handle = await echo.start(AWKWARD)
        assert _seen(await handle.result(timeout=scaled(20))) == _seen(AWKWARD)
        assert _seen(await app.get_event(handle.run_id, "value")) == _seen(AWKWARD)
        run = await app.get_run(handle.run_id)
    assert executions == [_seen(AWKWARD)] * 2
    assert _seen(run.input) == _seen(run.output) == _seen(AWKWARD)


async def test_an_idempotent_start_with_an_equal_input_is_the_same_run(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="idem", version="v1")
    async def idem(ctx: WorkflowContext, value: Any) -> None:
        return None

    async with app:
        first = await idem.start({"a": 1e23, "bb": [1, 2]}, idempotency_key="k")
        # Equal inputs: the same floats, keys in another order.
        again = await idem.start({"bb": [1, 2], "a": 1e23}, idempotency_key="k")
    assert again.run_id == first.run_id


# ------------------------------------------------------------------ the property


class Item(BaseModel):
    name: str
    amount: float
    big: int
    tags: dict[str, Any]


_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e23, 5e-324, 1.7976931348623157e308, -0.0, 0.1, 1e16, 2.0**63]
)
_SCALARS = st.none() | st.booleans() | st.integers(-(2**80), 2**80) | _FLOATS | _TEXT
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=16,
)  # dictionaries come in the order their keys were drawn: rarely sorted
VALUES = _JSON | st.builds(Item, name=_TEXT, amount=_FLOATS, big=st.integers(-(2**70), 2**70),
                           tags=st.dictionaries(_TEXT, _JSON, max_size=4))  # fmt: skip
PATHS = ("input", "step", "signal to itself", "client's signal", "child")


def _fidelity_app(
    url: str, seen: dict[str, list[list[str]]], codec: FernetCodec | None = None
) -> Durably:
    """A workflow that receives one value by every path and parks before it returns it: the
    next claim replays everything it received, as the replay tester does."""
    app = Durably(url, codec=codec)

    def echo(value: Any) -> Any:
        return value

    @app.workflow(name="child", version="v1")
    async def child(ctx: WorkflowContext, value: Any) -> Any:
        return await ctx.step.run("echo", echo, value)

    @app.workflow(name="fidelity", version="v1")
    async def fidelity(ctx: WorkflowContext, value: Any) -> dict[str, Any]:
        execution: list[str] = []  # what this execution received, in order
        seen.setdefault(ctx.run_id, []).append(execution)

        def got(v: Any) -> Any:
            execution.append(_seen(v))
            return v

        out = {"input": got(value), "step": got(await ctx.step.run("echo", echo, value))}
        await ctx.step.set_event("value", value)
        await ctx.step.send_signal("self", value, run_id=ctx.run_id)
        out["signal to itself"] = got(await ctx.step.wait_for_signal("self", timeout="1h"))
        out["client's signal"] = got(await ctx.step.wait_for_signal("client", timeout="1h"))
        out["child"] = got(await ctx.step.run_workflow(child, value))  # parks the run
        await ctx.step.sleep("nap", "100ms")  # parks it again: all of it is replayed
        return out

    return app


class _Engine(AppThread):
    """The fidelity app in a thread (hypothesis runs each example as a plain call)."""

    def __init__(self, url: str, codec: FernetCodec | None = None) -> None:
        self.seen: dict[str, list[list[str]]] = {}
        super().__init__(_fidelity_app(url, self.seen, codec))


async def _through_every_path(app: Durably, value: Any) -> dict[str, Any]:
    handle = await app.start("fidelity", value)
    await app.send_signal("client", value, run_id=handle.run_id)
    output = await handle.result(timeout=scaled(30))
    run, steps = await app.get_run(handle.run_id), await app.list_steps(handle.run_id)
    history = {"run": run.to_dict(), "steps": [s.to_dict() for s in steps]}
    return {"run_id": handle.run_id, "output": output, "run": run,
            "event": await app.get_event(handle.run_id, "value"),
            "history": json.dumps(history)}  # fmt: skip


@pytest.fixture
def engine(db_url: str) -> Iterator[_Engine]:
    with _Engine(db_url) as running:
        yield running


@pytest.fixture
def encrypted_engine(db_url: str) -> Iterator[_Engine]:
    with _Engine(db_url, FernetCodec([FernetCodec.generate_key()])) as running:
        yield running


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=VALUES)
def test_every_value_is_received_the_same_live_and_replayed(engine: _Engine, value: Any) -> None:
    _received_the_same(engine, value)


@settings(
    max_examples=10,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=VALUES)
def test_every_value_is_received_the_same_live_and_replayed_encrypted(
    encrypted_engine: _Engine, value: Any
) -> None:
    """Encryption at rest (SPEC §4.24) keeps every value exact, live and replayed."""
    _received_the_same(encrypted_engine, value)


def _received_the_same(engine: _Engine, value: Any) -> None:
    expected = _seen(json.loads(encode(value, "the value")))  # what the workflow sees live
    done = engine.run(_through_every_path(engine.app, value))
    executions = engine.seen[done["run_id"]]  # live, replayed after the child and the nap
    assert len(executions) >= 3 and all(e == [expected] * len(e) for e in executions)
    assert len(executions[-1]) == len(PATHS)
    assert _seen(done["output"]) == _seen(done["run"].output)
    assert list(done["output"]) == ["input", "step", *PATHS[2:]]
    assert all(_seen(done["output"][p]) == expected for p in PATHS)
    assert _seen(done["run"].input) == _seen(done["event"]) == expected
    report = replay(engine.app, done["history"])  # the exported history, in no worker
    assert report.finished and not report.output_changed
    assert _seen(report.output) == _seen(done["output"])
    assert engine.seen[done["run_id"]][-1] == [expected] * len(PATHS)  # the replay's own


async def test_a_run_in_flight_across_the_migration_to_json_completes(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0015 turns the jsonb payload columns into json under a run that waits: what was
    stored before keeps jsonb's form (nothing can restore the text), what comes after is
    exact, and the run carries on."""
    shipped = _queries.migrations
    monkeypatch.setattr(_queries, "migrations", lambda p: [m for m in shipped(p) if m[0] <= 14])

    def build() -> Durably:
        app = Durably(pg_url)

        @app.workflow(name="across", version="v1")
        async def across(ctx: WorkflowContext, value: Any) -> list[Any]:
            got = await ctx.step.run("read", lambda: {"bb": 1e23, "a": 1})
            return [value, got, await ctx.step.wait_for_signal("go", timeout="1h")]

        return app

    old = build()
    await old.migrate()
    # This code's park also writes `holds` (0019) and `parked_on`, `parked_fence` (0020),
    # and its start `attributes` (0027), which the release it stands in for did not: the
    # columns, as those migrations add them (IF NOT EXISTS), for the code to use.
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(
            "ALTER TABLE durably.runs ADD COLUMN holds integer NOT NULL DEFAULT 0,"
            " ADD COLUMN parked_on text[], ADD COLUMN parked_fence bigint,"
            " ADD COLUMN attributes jsonb"
        )
    async with old, old.worker(concurrency=1):
        handle = await old.get_workflow("across").start({"bb": 2, "a": -0.0})
        await eventually(lambda: _waiting(old, handle.run_id), what="the run to wait")
    monkeypatch.setattr(_queries, "migrations", shipped)
    new = build()
    async with new, new.worker(concurrency=1):
        await new.send_signal("go", {"bb": 1e23, "a": -0.0})
        output = await new.handle(handle.run_id).result(timeout=scaled(20))
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = 'durably' AND data_type IN ('json', 'jsonb')"
                " AND column_name IN ('input', 'output', 'data')"
            )
            types: dict[str, str] = dict(await cur.fetchall())
    assert _seen(output) == _seen([
        {"a": 0.0, "bb": 2}, {"a": 1, "bb": 100000000000000000000000}, {"bb": 1e23, "a": -0.0}
    ])  # fmt: skip
    assert types == {"runs.input": "json", "runs.output": "json", "step_attempts.output": "json",
                     "signals.data": "json"}  # fmt: skip


async def _waiting(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting"
