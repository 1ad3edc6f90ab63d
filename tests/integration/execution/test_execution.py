"""The execution layer (SPEC §4.12 to §4.16), in process, on both backends: concurrent code
replays exactly, records never wait for siblings, the engine's errors cannot be caught,
mistakes fail loudly, and no failure leaves a run looping on its lease."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from durably import Durably, RetryPolicy
from tests.helpers import eventually, scaled

FAST = RetryPolicy(max_attempts=3, initial_interval="10ms", maximum_interval="20ms")


async def _run(app: Durably, wf: Any, *args: Any, timeout: float = 20) -> Any:
    handle = await wf.start(*args)
    return await handle.wait(timeout=scaled(timeout))


async def test_gather_of_multi_step_branches_replays_each_branch_its_own_results(
    db_url: str,
) -> None:
    """Branches interleave differently every time; a sleep in each makes every branch
    replay. Same step names in every branch: a mix-up would swap results silently."""
    app = Durably(db_url)
    ran: list[str] = []

    async def body(tag: str, delay: float) -> str:
        await asyncio.sleep(delay)
        ran.append(tag)
        return tag

    async def branch(ctx: Any, i: int) -> list[str]:
        a = await ctx.step.run("a", body, f"{i}a", 0.03 * (3 - i))
        await ctx.step.sleep("nap", "20ms")
        b = await ctx.step.run("b", body, f"{i}b", 0.01 * i)
        c = await ctx.step.run(f"c{i}", body, f"{i}c", 0.0)
        return [a, b, c]

    @app.workflow(name="branches", version="v1")
    async def branches(ctx: Any) -> Any:
        return list(await asyncio.gather(*(branch(ctx, i) for i in range(3))))

    async with app, app.worker(concurrency=4):
        run = await _run(app, branches)
    assert run.status == "completed", run.error
    assert run.output == [[f"{i}a", f"{i}b", f"{i}c"] for i in range(3)]
    assert sorted(ran) == sorted(f"{i}{s}" for i in range(3) for s in "abc")  # each once


async def test_a_finished_step_is_durable_while_its_sibling_runs_and_cancel_undoes_it(
    db_url: str,
) -> None:
    app = Durably(db_url)
    release = asyncio.Event()
    undone: list[str] = []

    async def charge() -> str:
        return "charged"

    async def slow_copy() -> str:
        await release.wait()
        return "copied"

    def undo(value: str) -> None:
        undone.append(value)

    @app.workflow(name="pair", version="v1")
    async def pair(ctx: Any) -> Any:
        return list(await asyncio.gather(
            ctx.step.run("charge", charge, compensate=undo), ctx.step.run("copy", slow_copy)
        ))  # fmt: skip

    async with app, app.worker():
        handle = await pair.start()
        await eventually(lambda: _status_of(app, handle.run_id, "charge", "completed"),
                         what="charge recorded while copy still runs")  # fmt: skip
        await app.cancel(handle.run_id)
        run = await handle.wait(timeout=scaled(20))
        steps = {s.step: s.status for s in await app.list_steps(handle.run_id)}
    assert run.status == "canceled"
    assert undone == ["charged"]
    assert steps == {"charge": "completed", "copy": "canceled", "compensate:charge": "completed"}


async def _status_of(app: Durably, run_id: str, step: str, status: str) -> bool:
    return any(s.step == step and s.status == status for s in await app.list_steps(run_id))


async def test_engine_errors_cannot_be_swallowed_by_workflow_code(db_url: str) -> None:
    """A changed workflow that catches everything is still held with NonDeterminismError
    (SPEC §4.2), and its fallback step never runs."""
    app = Durably(db_url)
    fallback: list[int] = []

    async def one() -> int:
        return 1

    def fall() -> None:
        fallback.append(1)

    @app.workflow(name="swallow", version="v1")
    async def v1(ctx: Any) -> None:
        await ctx.step.run("first", one)
        await ctx.step.wait_for_signal("go")

    async with app, app.worker():
        handle = await v1.start()
        await eventually(lambda: _run_status(app, handle.run_id, "waiting"), what="the wait")

    changed = Durably(db_url)

    @changed.workflow(name="swallow", version="v1")
    async def v1_changed(ctx: Any) -> None:
        try:
            await ctx.step.run("renamed", one)
        except Exception:
            await ctx.step.run("fallback", fall)
        await ctx.step.wait_for_signal("go")

    async with changed, changed.worker():
        await changed.send_signal("go")
        await eventually(lambda: _run_status(changed, handle.run_id, "held"), what="the hold")
        run = await changed.get_run(handle.run_id)
    assert run.error is not None and run.error["type"] == "NonDeterminismError"
    assert "'first'" in run.error["message"] and "'renamed'" in run.error["message"]
    assert fallback == []


async def _run_status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


async def test_the_kind_is_part_of_the_match(db_url: str) -> None:
    app = Durably(db_url)

    async def x() -> str:
        return "function result"

    @app.workflow(name="kinds", version="v1")
    async def kinds(ctx: Any) -> None:
        await ctx.step.run("x", x)
        await ctx.step.wait_for_signal("go")

    async with app, app.worker():
        handle = await kinds.start()
        await eventually(lambda: _run_status(app, handle.run_id, "waiting"), what="the wait")

    changed = Durably(db_url)

    @changed.workflow(name="kinds", version="v1")
    async def kinds2(ctx: Any) -> Any:
        return await ctx.step.wait_for_signal("x")

    async with changed, changed.worker():
        await changed.send_signal("go")
        await eventually(lambda: _run_status(changed, handle.run_id, "held"), what="the hold")
        run = await changed.get_run(handle.run_id)
    assert run.error is not None and run.error["type"] == "NonDeterminismError"
    assert "function step 'x'" in run.error["message"]


async def test_mistakes_fail_loudly_and_never_loop(db_url: str) -> None:
    app = Durably(db_url, max_step_attempts=50)

    async def one() -> int:
        return 1

    @app.workflow(name="not-json", version="v1")
    async def not_json(ctx: Any) -> Any:
        await ctx.step.run("one", one)
        return object()

    @app.workflow(name="forgot-await", version="v1")
    async def forgot(ctx: Any) -> None:
        ctx.step.sleep("nap", "1h")
        await ctx.step.run("one", one)

    @app.workflow(name="returns-coroutine", version="v1")
    async def returns_coroutine(ctx: Any) -> Any:
        return ctx.step.run("one", one)

    def nested_body() -> None:
        ctx_holder[0].step.run("inner", one)

    ctx_holder: list[Any] = []

    @app.workflow(name="nested", version="v1")
    async def nested(ctx: Any) -> None:
        ctx_holder.append(ctx)
        await ctx.step.run("outer", nested_body, retry=FAST)

    @app.workflow(name="timer", version="v1")
    async def timer(ctx: Any) -> None:
        await asyncio.sleep(1)

    @app.workflow(name="network", version="v1")
    async def network(ctx: Any) -> None:
        # Caught or not, the run is failed: nothing of it could be replayed.
        with contextlib.suppress(Exception):
            await asyncio.open_connection("127.0.0.1", 9)

    @app.workflow(name="subprocess", version="v1")
    async def subprocess(ctx: Any) -> None:
        await asyncio.create_subprocess_exec("true")

    async with app, app.worker():
        runs = {wf.name: await _run(app, wf) for wf in
                (not_json, forgot, returns_coroutine, nested, timer, network,
                 subprocess)}  # fmt: skip
    errors = {name: run.error for name, run in runs.items()}
    assert all(run.status == "failed" for run in runs.values()), errors
    assert errors["not-json"]["type"] == "InvalidInput"
    assert "did you forget await" in errors["forgot-await"]["message"]
    assert "'nap'" in errors["forgot-await"]["message"]
    assert errors["returns-coroutine"]["type"] in ("InvalidInput", "WorkflowMisuseError")
    assert errors["nested"]["type"] == "WorkflowMisuseError"
    assert "inside a step body" in errors["nested"]["message"]
    assert errors["timer"]["type"] == "WorkflowMisuseError"
    for name in ("network", "subprocess"):  # README: I/O is refused as misuse
        assert errors[name]["type"] == "WorkflowMisuseError", errors[name]
        assert "I/O" in errors[name]["message"]
    assert all(r.attempts == 1 for r in runs.values())


async def test_a_step_failing_for_good_beside_a_signal_wait_fails_the_run_and_compensates(
    db_url: str,
) -> None:
    app = Durably(db_url)
    undone: list[str] = []

    async def ok() -> str:
        return "done"

    async def broken() -> None:
        raise ValueError("boom")

    @app.workflow(name="beside", version="v1")
    async def beside(ctx: Any) -> None:
        await ctx.step.run("prepare", ok, compensate=undone.append)
        await ctx.gather(ctx.step.wait_for_signal("never"), ctx.step.run("x", broken, retry=FAST))

    async with app, app.worker():
        handle = await beside.start()
        run = await handle.wait(timeout=scaled(20))
        steps = await app.list_steps(handle.run_id)
    assert run.status == "failed" and run.error is not None
    assert run.error["message"].startswith("step 'x' failed after 3 attempts: ValueError: boom")
    assert undone == ["done"]
    assert not [s for s in steps if s.status == "running"]
    failed = [s for s in steps if s.step == "x"]
    assert len(failed) == 3 and all("ValueError: boom" in (s.error or {}).get("traceback", "")
                                    for s in failed)  # fmt: skip


async def test_a_workflow_retry_runs_a_failed_child_again(db_url: str) -> None:
    """The same child, resumed: its step that failed runs again, its completed one does
    not (a new child would run it again)."""
    app = Durably(db_url)
    tries: list[int] = []
    charged: list[int] = []

    def attempt_no() -> int:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("first child fails")
        return len(tries)

    @app.workflow(name="kid", version="v1")
    async def kid(ctx: Any) -> Any:
        await ctx.step.run("charge", lambda: charged.append(1))
        return await ctx.step.run("n", attempt_no, retry=RetryPolicy(max_attempts=1))

    twice = RetryPolicy(max_attempts=2, initial_interval="10ms")

    @app.workflow(name="mom", version="v1", retry=twice)
    async def mom(ctx: Any) -> Any:
        return await ctx.step.run_workflow(kid, None)

    async with app, app.worker():
        run = await _run(app, mom)
        kids = [r for r in await app.list_runs(workflow="kid") if r.parent_run_id == run.run_id]
    assert run.status == "completed", run.error
    assert run.output == 2 and run.attempts == 2
    assert len(kids) == 1 and kids[0].resumes == (2,)
    assert charged == [1]


async def test_parent_deadline_and_failure_cancel_children(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="waits", version="v1")
    async def waits(ctx: Any, tag: str) -> Any:
        return await ctx.step.wait_for_signal(f"never:{tag}")

    @app.workflow(name="parent", version="v1")
    async def parent(ctx: Any, mode: str) -> None:
        kept = ctx.step.start_workflow(waits, "kept", on_parent_close="abandon")
        child = ctx.step.start_workflow(waits, mode)
        if mode == "fail":
            await ctx.step.run("boom", _boom, retry=FAST)
        await child
        await kept

    async with app, app.worker():
        # A deadline past the parent's first claim (it starts the children), busy or not.
        by_deadline = await parent.start("deadline", deadline_at=f"+{scaled(1)}s")
        by_failure = await parent.start("fail")
        runs = [
            await by_deadline.wait(timeout=scaled(20)),
            await by_failure.wait(timeout=scaled(20)),
        ]
        assert [r.status for r in runs] == ["failed", "failed"]
        for run in runs:
            kids = [r for r in await app.list_runs(workflow="waits", limit=10)
                    if r.parent_run_id == run.run_id]  # fmt: skip
            by_tag = {k.input: k.status for k in kids}
            assert by_tag == {"kept": "waiting", run.input: "canceled"}, by_tag
            steps = await app.list_steps(run.run_id)
            assert not [s for s in steps if s.status == "running"], steps


def _boom() -> None:
    raise ValueError("boom")


async def test_children_fanned_out_start_at_once(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="leaf", version="v1")
    async def leaf(ctx: Any, i: int) -> int:
        await ctx.step.wait_for_signal(f"leaf:{i}")
        return i

    @app.workflow(name="fan", version="v1")
    async def fan(ctx: Any) -> int:
        results = await ctx.gather(*(ctx.step.run_workflow(leaf, i) for i in range(40)))
        return sum(results)

    async with app, app.worker(concurrency=50):
        handle = await fan.start()

        async def all_waiting() -> bool:
            kids = await app.list_runs(workflow="leaf", status="waiting", limit=100)
            return len(kids) == 40

        await eventually(all_waiting, what="all 40 children started and waiting")
        for i in range(40):
            await app.send_signal(f"leaf:{i}", None)
        run = await handle.wait(timeout=scaled(30))
    assert run.status == "completed" and run.output == sum(range(40))


async def test_wait_first_and_a_step_timeout(db_url: str) -> None:
    app = Durably(db_url)

    async def hang() -> None:
        await asyncio.sleep(30)

    async def quick() -> str:
        return "quick"

    @app.workflow(name="race", version="v1")
    async def race(ctx: Any) -> list[Any]:
        index, value = await ctx.wait_first(
            ctx.step.wait_for_signal("never"), ctx.step.run("quick", quick)
        )
        try:
            await ctx.step.run("hang", hang, timeout="50ms", retry=FAST)
        except Exception as exc:
            return [index, value, type(exc).__name__, str(exc)]
        return [index, value]

    async with app, app.worker():
        handle = await race.start()
        run = await handle.wait(timeout=scaled(20))
        steps = await app.list_steps(handle.run_id)
    assert run.status == "completed", run.error
    assert run.output[:3] == [1, "quick", "StepFailedError"]
    assert "StepTimeout" in run.output[3]
    assert not [s for s in steps if s.status == "running"]
    assert [s.status for s in steps if s.step == "never"] == ["canceled"]


async def test_a_body_that_blocks_the_event_loop_is_reported(db_url: str, caplog: Any) -> None:
    import logging
    import time

    app = Durably(db_url)

    async def blocks() -> str:
        time.sleep(1.6)  # the mistake under test: blocking inside an async body
        return "done"

    @app.workflow(name="blocker", version="v1")
    async def blocker(ctx: Any) -> Any:
        return await ctx.step.run("blocks", blocks)

    with caplog.at_level(logging.WARNING, logger="durably.worker"):
        async with app, app.worker(heartbeat="0.5s"):
            run = await _run(app, blocker)
    assert run.status == "completed"
    warnings = [r.getMessage() for r in caplog.records if "blocked" in r.getMessage()]
    assert warnings and "in blocks" in warnings[0], warnings


async def test_a_failed_engine_write_is_never_seen_by_workflow_code(
    pg_url: str, fault_proxy: Any
) -> None:
    """The connection drops while step `a` runs: its record cannot be written. The
    workflow's `except Exception` must not see that failure (no fallback step): the
    execution stops and the run is claimed again, where `a` runs once more."""
    app = Durably(fault_proxy.url_for(pg_url))
    running = asyncio.Event()
    release = asyncio.Event()
    ran: list[str] = []

    async def a() -> str:
        ran.append("a")
        if len(ran) == 1:
            running.set()
            await release.wait()
        return "a"

    def fallback() -> str:
        ran.append("fallback")
        return "fallback"

    @app.workflow(name="guarded", version="v1")
    async def guarded(ctx: Any) -> Any:
        try:
            first = await ctx.step.run("a", a)
            return [first, await ctx.step.run("b", fallback)]
        except Exception:
            return await ctx.step.run("fallback", fallback)

    client = Durably(pg_url)  # reads the outcome directly, not through the proxy
    async with app, client, app.worker(lease="1s", heartbeat="0.2s"):
        handle = await guarded.start()
        await asyncio.wait_for(running.wait(), scaled(20))
        fault_proxy.cut()
        release.set()
        run = await client.handle(handle.run_id).wait(timeout=scaled(30))
    assert run.status == "completed" and run.output == ["a", "fallback"], run.error
    assert ran.count("fallback") == 1  # as step "b", never as the fallback
