"""`send_signal` from psql (SPEC §4.3, §4.25): delivered to every waiting run, buffered
before a waiter, de-duplicated by its key, addressed to one run, refused with nothing
written; the §4.3 result as jsonb."""

from __future__ import annotations

import functools
import json
from typing import Any

from durably import Durably, WorkflowContext
from tests.helpers import eventually, scaled
from tests.integration.sql.conftest import Psql


def _app(url: str) -> Durably:
    app = Durably(url)

    @app.workflow(name="wait", version="v1")
    async def wait(ctx: WorkflowContext, name: str) -> Any:
        return await ctx.step.wait_for_signal(name)

    return app


async def _send(psql: Psql, args: str) -> dict[str, Any]:
    [line] = await psql.ok(f"BEGIN;\nSELECT durably.send_signal({args});\nCOMMIT;")
    return dict(json.loads(line))


async def _waiting(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting"


async def test_every_waiting_run_receives_it(psql: Psql) -> None:
    app = _app(psql.url)
    async with app, app.worker():
        runs = [await app.start("wait", "go") for _ in range(2)]
        for run in runs:
            await eventually(functools.partial(_waiting, app, run.run_id), what="waiting")
        sent = await _send(psql, "'go', '{\"n\": 1}'")
        assert sent == {"delivered_to": sorted(r.run_id for r in runs), "buffered": False,
                        "duplicate": False}  # fmt: skip
        for run in runs:
            assert await run.result(timeout=scaled(10)) == {"n": 1}


async def test_a_signal_sent_before_its_wait_is_buffered_for_it(psql: Psql) -> None:
    app = _app(psql.url)
    async with app:
        first = await _send(psql, "name => 'early', data => '[1]', idempotency_key => 'k'")
        again = await _send(psql, "'early', '[2]', idempotency_key => 'k'")
        # One key whichever client sends: the Python client's send is the same one.
        assert (await app.send_signal("early", [4], idempotency_key="k"))["duplicate"]
        await app.send_signal("early", [5], idempotency_key="py")
        assert (await _send(psql, "'early', '[6]', idempotency_key => 'py'"))["duplicate"]
        await _send(psql, "'early', '[3]', expires => interval '1 hour'")
        signals = await app.list_signals("early")
        assert first == {"delivered_to": [], "buffered": True, "duplicate": False}
        assert again == {"delivered_to": [], "buffered": True, "duplicate": True}
        assert [s["data"] for s in signals] == [[1], [5], [3]]
        assert signals[0]["expires_at"] is None and signals[2]["expires_at"] is not None
        async with app.worker():
            got = [await (await app.start("wait", "early")).result(timeout=scaled(10))
                   for _ in range(3)]  # fmt: skip
        assert got == [[1], [5], [3]]  # in send order, each to one wait


async def test_one_run_is_addressed_and_a_finished_one_refused(psql: Psql) -> None:
    app = _app(psql.url)
    async with app, app.worker():
        run = await app.start("wait", "solo")
        await eventually(lambda: _waiting(app, run.run_id), what="waiting")
        sent = await _send(psql, f"'solo', 'null', run_id => '{run.run_id}'")
        assert sent == {"delivered_to": [run.run_id], "buffered": False, "duplicate": False}
        assert await run.result(timeout=scaled(10)) is None
        err = await psql.fails(
            f"SELECT durably.send_signal('solo', '1', run_id => '{run.run_id}');"
        )
        assert f"55000: cannot signal run {run.run_id}: it is already completed" in err
        err = await psql.fails("SELECT durably.send_signal('solo', '1', run_id => 'nope');")
        assert "P0002: no run with id 'nope'" in err
        assert len(await app.list_signals("solo", pending=False)) == 1  # the delivered one


async def test_a_refused_or_rolled_back_send_stores_nothing(psql: Psql) -> None:
    app = _app(psql.url)
    async with app:
        for name in ("''", "' \t'", "NULL"):
            err = await psql.fails(f"SELECT durably.send_signal({name}, '1');")
            assert "22023: a signal needs a name that is not blank" in err, err
        deep, huge = "[" * 256 + "]" * 256, "9" * 4301  # 255 levels: taken, as in Python
        err = await psql.fails(f"SELECT durably.send_signal('deep', '{deep}');")
        assert "22023: the data of signal 'deep' is nested more than 254 levels" in err, err
        err = await psql.fails(f"SELECT durably.send_signal('huge', '[{huge}]');")
        assert "22023: the data of signal 'huge' is not JSON: it holds an integer" in err, err
        await psql.ok("BEGIN;\nSELECT durably.send_signal('gone', '1');\nROLLBACK;")
        assert await app.list_signals(pending=False) == []


async def test_the_reserved_request_prefix_is_refused_from_sql_too(psql: Psql) -> None:
    """`durably:request:NAME` is how requests are sent (SPEC §4.22): app.send_signal and
    ctx.step.send_signal refuse it; from SQL it reached wait_for_request as a request
    nobody could answer. Refused with 22023, nothing stored."""
    app = _app(psql.url)
    async with app:
        err = await psql.fails("SELECT durably.send_signal('durably:request:ask', '1');")
        assert "22023" in err and "reserved" in err, err
        assert await app.list_signals(pending=False) == []
