"""The engine's core semantics, in process, on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from durably import (
    Durably,
    IdempotencyConflictError,
    InvalidInput,
    NonRetryableError,
    PayloadTooLarge,
    RetryPolicy,
    RunFailedError,
    StepFailedError,
    WorkflowContext,
    WorkflowNotFound,
)
from durably.core.errors import ConfigurationError
from tests.helpers import duration, eventually, scaled

FAST = RetryPolicy(max_attempts=3, initial_interval="10ms", maximum_interval="50ms")


class Order(BaseModel):
    id: str
    size: int = 1


async def test_main_path_records_each_step_once(db_url: str) -> None:
    app = Durably(db_url)
    calls: list[str] = []

    def body(name: str) -> str:
        calls.append(name)
        return name.upper()

    @app.workflow(name="main", version="v1")
    async def main(ctx: Any, order: Order) -> dict[str, Any]:
        a = await ctx.step.run("a", body, "a")
        await ctx.step.sleep("nap", "50ms")
        b = await ctx.step.run("b", body, "b")
        got = await ctx.step.wait_for_signal(f"go:{order.id}", timeout=duration(10))
        return {"a": a, "b": b, "got": got}

    async with app, app.worker(concurrency=4):
        handle = await main.start(Order(id="o1"))
        await eventually(lambda: _waiting_on(app, handle.run_id), what="the signal wait")
        result = await app.send_signal("go:o1", {"ok": True})
        assert result == {"delivered_to": [handle.run_id], "buffered": False, "duplicate": False}
        assert await handle.result(timeout=scaled(10)) == {"a": "A", "b": "B", "got": {"ok": True}}
        steps = await app.list_steps(handle.run_id)
    assert calls == ["a", "b"]  # replays after the sleep and the wait re-ran nothing
    assert [(s.step, s.kind, s.status) for s in steps] == [
        ("a", "function", "completed"),
        ("nap", "sleep", "completed"),
        ("b", "function", "completed"),
        ("go:o1", "signal-wait", "completed"),
    ]
    run = await _get(app, handle.run_id)
    assert run.status == "completed" and run.attempts == 1 and run.fence >= 3


async def _waiting_on(app: Durably, run_id: str) -> bool:
    run = await app.get_run(run_id)
    return run.status == "waiting" and (run.waiting_for or "").startswith("signal:")


async def _get(app: Durably, run_id: str) -> Any:
    async with app:
        return await app.get_run(run_id)


async def test_step_retries_are_durable_and_bounded(db_url: str) -> None:
    app = Durably(db_url)
    attempts: dict[str, int] = {"flaky": 0, "broken": 0}

    def flaky(kind: str, fail_times: int) -> int:
        attempts[kind] += 1
        if attempts[kind] <= fail_times:
            raise RuntimeError(f"boom attempt {attempts[kind]}")
        return attempts[kind]

    @app.workflow(name="retry", version="v1")
    async def wf(ctx: Any, fail_times: int) -> int:
        kind = "flaky" if fail_times < 3 else "broken"
        return int(await ctx.step.run("flaky-step", flaky, kind, fail_times, retry=FAST))

    async with app, app.worker():
        ok = await wf.start(2)
        assert await ok.result(timeout=scaled(10)) == 3
        bad = await wf.start(5)
        with pytest.raises(RunFailedError, match="boom attempt 3"):
            await bad.result(timeout=scaled(10))
        steps = await app.list_steps(bad.run_id)
    assert [s.status for s in steps] == ["failed", "failed", "failed"]
    assert attempts == {"flaky": 3, "broken": 3}


async def test_non_retryable_error_fails_the_step_at_once(db_url: str) -> None:
    app = Durably(db_url)
    calls = []

    def fatal() -> None:
        calls.append(1)
        raise NonRetryableError("bad request")

    @app.workflow(name="fatal", version="v1")
    async def wf(ctx: Any) -> None:
        await ctx.step.run("fatal", fatal)

    async with app, app.worker():
        handle = await wf.start()
        with pytest.raises(RunFailedError, match="bad request"):
            await handle.result(timeout=scaled(10))
    assert calls == [1]


async def test_caught_step_failure_replays_the_same_path(db_url: str) -> None:
    app = Durably(db_url)
    calls = []

    def fails() -> None:
        calls.append(1)
        raise ValueError("nope")

    @app.workflow(name="caught", version="v1")
    async def wf(ctx: Any) -> str:
        try:
            await ctx.step.run("fails", fails, retry=RetryPolicy(max_attempts=1))
            path = "ok"
        except StepFailedError as exc:
            path = f"caught {exc.error['type']}"
        await ctx.step.sleep("later", "30ms")  # forces a replay
        return path

    async with app, app.worker():
        handle = await wf.start()
        assert await handle.result(timeout=scaled(10)) == "caught ValueError"
    assert calls == [1]


async def test_parallel_steps_and_a_sleeping_sibling(db_url: str) -> None:
    app = Durably(db_url)
    calls: list[str] = []

    async def slow(name: str) -> str:
        calls.append(name)
        await asyncio.sleep(0.2)
        return name

    @app.workflow(name="parallel", version="v1")
    async def wf(ctx: Any) -> list[Any]:
        return list(
            await asyncio.gather(
                ctx.step.run("slow-a", slow, "a"),
                ctx.step.sleep("nap", "10ms"),
                ctx.step.run("slow-b", slow, "b"),
            )
        )

    async with app, app.worker():
        handle = await wf.start()
        assert await handle.result(timeout=scaled(10)) == ["a", None, "b"]
    assert sorted(calls) == ["a", "b"]  # the run parked on the sleep; nothing ran twice


async def test_idempotent_start(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="idem", version="v1")
    async def wf(ctx: WorkflowContext, order: Order) -> None:
        return None

    async with app:
        first = await wf.start(Order(id="d5"), idempotency_key="same-key")
        again = await wf.start({"id": "d5"}, idempotency_key="same-key")  # type: ignore[arg-type]
        assert again.run_id == first.run_id
        with pytest.raises(IdempotencyConflictError, match="different input"):
            await wf.start(Order(id="d5-other"), idempotency_key="same-key")
        handles = await asyncio.gather(
            *(wf.start(Order(id="c"), idempotency_key="concurrent") for _ in range(20))
        )
        assert len({h.run_id for h in handles}) == 1
        assert len(await app.list_runs(workflow="idem")) == 2


async def test_bad_input_writes_nothing(db_url: str) -> None:
    app = Durably(db_url, max_payload_bytes=1000)

    @app.workflow(name="strict", version="v1")
    async def wf(ctx: WorkflowContext, order: Order) -> None:
        return None

    async with app:
        with pytest.raises(InvalidInput, match="size"):
            await wf.start({"id": "x", "size": "not a number"})  # type: ignore[arg-type]
        with pytest.raises(PayloadTooLarge, match="over the limit"):
            await wf.start({"id": "x" * 2000})  # type: ignore[arg-type]
        with pytest.raises(WorkflowNotFound, match="nope"):
            await app.start("nope", {})
        assert await app.list_runs() == []


def test_bad_schema_name_is_rejected_before_any_sql(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="invalid schema name"):
        Durably(f"sqlite:///{tmp_path}/x.db", schema='durably"; DROP TABLE x; --')
    assert not (tmp_path / "x.db").exists()


async def test_unknown_version_stays_pending_untouched(db_url: str) -> None:
    old = Durably(db_url)
    new = Durably(db_url)

    @old.workflow(name="versioned", version="v1")
    async def v1(ctx: Any) -> str:
        return "v1"

    @new.workflow(name="versioned", version="v2")
    async def v2(ctx: Any) -> str:
        return "v2"

    async with old, new:
        handle = await v1.start()
        async with new.worker():
            v2_run = await v2.start()
            assert await v2_run.result(timeout=scaled(10)) == "v2"
        run = await old.get_run(handle.run_id)
        assert (run.status, run.attempts, run.fence, run.error) == ("pending", 0, 0, None)
        assert [r.run_id for r in await new.list_stuck()] == [handle.run_id]
        async with old.worker():
            assert await handle.result(timeout=scaled(10)) == "v1"


async def test_a_run_has_a_limit_of_step_attempts(db_url: str) -> None:
    app = Durably(db_url, max_step_attempts=5)

    @app.workflow(name="loop", version="v1")
    async def wf(ctx: Any) -> None:
        for i in range(10):
            await ctx.step.run(f"s{i}", lambda: None)

    async with app, app.worker():
        handle = await wf.start()
        with pytest.raises(RunFailedError, match="limit of 5 step attempts"):
            await handle.result(timeout=scaled(10))
        assert len(await app.list_steps(handle.run_id)) == 5


async def test_a_step_result_that_is_not_json_names_the_step(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="unserializable", version="v1")
    async def wf(ctx: Any) -> None:
        await ctx.step.run("make-object", lambda: object())

    async with app, app.worker():
        handle = await wf.start()
        with pytest.raises(RunFailedError, match="step 'make-object'"):
            await handle.result(timeout=scaled(10))
        steps = await app.list_steps(handle.run_id)
    assert [(s.step, s.status, s.attempt) for s in steps] == [("make-object", "failed", 1)]


def test_the_sync_facade_without_an_event_loop(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="plain", version="v1")
    async def wf(ctx: Any, n: int) -> int:
        return n * 2

    client = app.sync
    run_id = client.start("plain", 21, idempotency_key="k").run_id
    assert client.start("plain", 21, idempotency_key="k").run_id == run_id
    assert client.get_run(run_id).status == "pending"
    assert client.send_signal("nobody", 1) == {"delivered_to": [], "buffered": True,
                                               "duplicate": False}  # fmt: skip
    assert [r.run_id for r in client.list_runs()] == [run_id]
    assert client.cancel(run_id).status == "canceled"
    client.close()
