"""Encryption at rest (SPEC §4.24) on the payload paths test_encryption.py does not take:
a step body's stream value, a continue-as-new input, a child's failure seen by its parent,
an undo's failure, a debounced start's input (opened and joined), a fork's and a resume's
copies, a request taken before continue-as-new; a dump of the database holds none."""

from __future__ import annotations

import contextlib
from typing import Any

from durably import Durably, FernetCodec, RetryPolicy, StepContext, WorkflowContext
from tests.helpers import duration, eventually, scaled
from tests.integration.store.test_encryption import _dump

SECRETS = {
    "body_stream": "S3CR3T-BODYSTREAM-p1", "next_input": "S3CR3T-NEXTINPUT-p2",
    "child_fail": "S3CR3T-CHILDFAIL-p3", "undo_fail": "S3CR3T-UNDOFAIL-p4",
    "undo_step": "S3CR3T-UNDOSTEP-p5", "debounce_1": "S3CR3T-DEBOUNCE1-p6",
    "debounce_2": "S3CR3T-DEBOUNCE2-p7", "fork_in": "S3CR3T-FORKIN-p8",
    "taken": "S3CR3T-TAKEN-p9",
}  # fmt: skip
ONCE = RetryPolicy(max_attempts=1)


async def test_no_plaintext_on_the_other_payload_paths(db_url: str, tmp_path: Any) -> None:
    app = Durably(db_url, codec=FernetCodec([FernetCodec.generate_key()]))

    @app.workflow(name="bad_child", version="v1", retry=ONCE)
    async def bad_child(ctx: WorkflowContext) -> None:
        raise RuntimeError(SECRETS["child_fail"])

    undos = {"n": 0}

    def undo(result: Any) -> None:
        undos["n"] += 1
        if undos["n"] == 1:  # its failure is recorded; the retry undoes it
            raise RuntimeError(SECRETS["undo_fail"])

    @app.workflow(name="paths", version="v1", retry=ONCE)
    async def paths(ctx: WorkflowContext, n: int) -> str:
        if n == 0:

            def body(sctx: StepContext) -> None:
                sctx.write_stream("s", SECRETS["body_stream"])

            await ctx.step.run("body", body)
            ctx.continue_as_new(1)
        with contextlib.suppress(Exception):  # its failure is recorded in this run
            await ctx.step.run_workflow(bad_child)
        await ctx.step.run("undoable", lambda: SECRETS["undo_step"], compensate=undo,
                           retry=ONCE)  # fmt: skip
        raise RuntimeError("fail for good: undo")

    @app.workflow(name="echo", version="v1", retry=ONCE)
    async def echo(ctx: WorkflowContext, value: str) -> str:
        if value == SECRETS["fork_in"]:
            raise RuntimeError("to be resumed")
        return "ok"

    @app.workflow(name="chain", version="v1")
    async def chain(ctx: WorkflowContext, n: int) -> str:
        if n == 0:
            await ctx.step.wait_for_request("ask", timeout=duration(30))
            ctx.continue_as_new(1)
        req = await ctx.step.wait_for_request("ask", timeout=duration(30))
        assert req is not None
        await ctx.step.reply(req, "ok")
        return "done"

    async with app:
        await paths.start(0)
        await echo.start(SECRETS["debounce_1"], debounce="1h", debounce_key="k")
        await echo.start(SECRETS["debounce_2"], debounce="1h", debounce_key="k")
        failed = await echo.start(SECRETS["fork_in"])
        chained = await chain.start(0)
        async with app.worker():
            await eventually(lambda: _ended(app, failed.run_id), what="the echo")
            await app.fork(failed.run_id, 0)
            await app.resume(failed.run_id)
            answer = await app.request(chained.run_id, "ask", SECRETS["taken"],
                                       timeout=scaled(30))  # fmt: skip
            assert answer == "ok"

            async def chain_ended() -> bool:
                return await _ended(app, (await app.list_runs(workflow="paths"))[0].run_id)

            await eventually(chain_ended, what="the continued run")
    dump = _dump(db_url, tmp_path)
    leaked = [name for name, secret in SECRETS.items() if secret.encode() in dump]
    assert leaked == []


async def _ended(app: Durably, run_id: str) -> bool:
    run = await app.get_run(run_id)
    return run.status in ("completed", "failed", "canceled") and not run.compensating
