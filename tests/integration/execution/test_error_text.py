"""An error's message is user text, stored whatever it holds, on both backends (SPEC
§4.20): a lone surrogate (from `surrogateescape` decoding, a cut UTF-16 pair) or a NUL is
stored escaped, and the run fails as it would with any message."""

from __future__ import annotations

import pytest

from durably import Durably, RetryPolicy, WorkflowContext
from tests.helpers import scaled

ONCE = RetryPolicy(max_attempts=1)
TEXTS = ["lone \ud800 high", "lone \udcff low", "nul \x00 and \ud83d"]


@pytest.mark.parametrize("text", TEXTS, ids=["high", "low", "nul-and-high"])
@pytest.mark.parametrize("where", ["step", "flow"])
async def test_an_error_message_with_a_lone_surrogate_is_stored_escaped(
    db_url: str, text: str, where: str
) -> None:
    app = Durably(db_url)

    def body() -> None:
        raise ValueError(text)

    @app.workflow(name="says", version="v1")
    async def says(ctx: WorkflowContext) -> None:
        if where == "step":
            await ctx.step.run("says", body, retry=ONCE)
        raise ValueError(text)

    async with app, app.worker():
        run = await (await says.start()).wait(timeout=scaled(20))
        steps = await app.list_steps(run.run_id)
    assert run.status == "failed", run.error
    error = run.error or {}
    if where == "step":
        assert [s.status for s in steps] == ["failed"]
        error = error["cause"]
    escaped = text.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")
    assert (error["type"], error["message"]) == ("ValueError", escaped), error
