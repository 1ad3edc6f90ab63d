"""The SQL API (SPEC §4.25) and chains of continue-as-new runs (§4.23): `start_run` with a
chain's key answers its newest run for the input the chain began with, and `send_signal`
to a run that continued reaches the chain's live run. PostgreSQL only."""

from __future__ import annotations

from typing import Any

from durably import Durably, WorkflowContext
from tests.helpers import eventually, scaled
from tests.integration.sql.conftest import Psql


async def test_a_chain_through_the_sql_api(psql: Psql) -> None:
    app = Durably(psql.url)

    @app.workflow(name="hop", version="v1")
    async def hop(ctx: WorkflowContext, gen: int) -> Any:
        if gen == 0:
            ctx.continue_as_new(1)
        return await ctx.step.wait_for_signal("go", timeout="60s")

    async with app, app.worker():
        [first] = await psql.ok("SELECT durably.start_run('hop', 'v1', '0', 'k-1');")

        async def continued() -> bool:
            return (await app.get_run(first)).status == "continued"

        await eventually(continued, what="the continue")
        newest = (await app.get_run(first)).continued_as
        [again] = await psql.ok("SELECT durably.start_run('hop', 'v1', '0', 'k-1');")
        assert again == newest
        refused = await psql.run("SELECT durably.start_run('hop', 'v1', '1', 'k-1');")
        assert refused.returncode != 0 and "23505" in refused.stderr
        [sent] = await psql.ok(f"SELECT durably.send_signal('go', '\"hi\"', run_id => '{first}');")
        assert newest in sent or '"buffered": true' in sent
        assert await app.handle(first).result(timeout=scaled(30)) == "hi"
