"""`start_run` from psql (SPEC §4.25): in a transaction that commits (a worker runs it at
once) or rolls back (nothing), idempotent across connections, values as jsonb holds them,
queues' limits, and bad arguments refused with nothing written."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from durably import Durably, RetryPolicy, WorkflowContext
from durably.store.queues import QueueClaims
from tests.helpers import eventually, scaled
from tests.integration.sql.conftest import Psql

LONG = '{"k": "' + "x" * 1025 + '"}'
OBJECT = '{"zeta": 1, "alpha": {"y": 2, "x": 1}, "mid": [1.5, 1e2, -0.0], "b": true}'


def _app(url: str, schema: str = "durably") -> Durably:
    app = Durably(url, schema=schema)

    def keys_of(value: dict[str, Any]) -> list[str]:
        return list(value)

    @app.workflow(name="echo", version="v1")
    async def echo(ctx: WorkflowContext, value: Any) -> Any:
        return value

    @app.workflow(name="park", version="v1")
    async def park(ctx: WorkflowContext, value: dict[str, Any]) -> Any:
        first = await ctx.step.run("keys", keys_of, value)
        signal = await ctx.step.wait_for_signal("go")
        return {"first": first, "replayed": list(value), "value": value, "signal": signal}

    return app


async def test_a_committed_start_is_run_at_once(psql: Psql) -> None:
    # A schema of its own: start_run notifies the channel of the schema it is in.
    app = _app(psql.url, schema="engine")
    async with app, app.worker(poll_interval="1h"):
        await (await app.start("echo", 0)).result(timeout=scaled(10))  # the worker is idle
        [run_id] = await psql.ok(
            "BEGIN;\nSELECT engine.start_run('echo', 'v1', '[1, \"a\"]');\nCOMMIT;"
        )
        # Only the NOTIFY wakes the worker before its hour's poll.
        assert await app.handle(run_id).result(timeout=scaled(10)) == [1, "a"]
        [by_name] = await psql.ok("SELECT engine.start_run('echo', NULL, '{\"n\": 2}');")
        assert await app.handle(by_name).result(timeout=scaled(10)) == {"n": 2}
        run = await app.get_run(by_name)
    # Bound by the claim, as a thin client's start: the newest version and its attempts.
    assert (run.version, run.attempts, run.status) == ("v1", 1, "completed")


async def test_a_rolled_back_start_leaves_nothing(psql: Psql) -> None:
    app = _app(psql.url)
    async with app:  # migrated
        await psql.ok(
            "BEGIN;\nSELECT durably.start_run('echo', 'v1', '1', queue => 'q');\nROLLBACK;"
        )
        assert await app.list_runs() == []
        assert await app.queue_counts() == []


async def test_concurrent_starts_with_one_key_make_one_run(psql: Psql) -> None:
    app = _app(psql.url)
    start = "SELECT durably.start_run('echo', 'v1', '{\"a\": 1}', idempotency_key => 'k');"
    async with app, await psycopg.AsyncConnection.connect(psql.url) as first:
        [(run_id,)] = await (await first.execute(start)).fetchall()  # its transaction open
        second = psql.start(start)
        await eventually(lambda: _waits_for_a_lock(psql.url), what="the second start waiting")
        await first.commit()
        out, err = await asyncio.to_thread(second.communicate, timeout=scaled(30))
        assert second.returncode == 0, err
        assert out.split() == [run_id]
        # The first rolled back: the second, waiting for it, starts the run itself.
        await first.execute(start.replace("'k'", "'k2'"))
        third = psql.start(start.replace("'k'", "'k2'"))
        await eventually(lambda: _waits_for_a_lock(psql.url), what="the third start waiting")
        await first.rollback()
        out, err = await asyncio.to_thread(third.communicate, timeout=scaled(30))
        assert third.returncode == 0, err
        runs = await app.list_runs()
    assert sorted(r.run_id for r in runs) == sorted([run_id, out.strip()])
    assert {r.idempotency_key for r in runs} == {"k", "k2"}


async def _waits_for_a_lock(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await (await conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%start_run%'"
        )).fetchall()  # fmt: skip
    return bool(rows)


async def test_a_key_answers_its_run_or_refuses_another_input(psql: Psql) -> None:
    app = _app(psql.url)
    async with app:
        python = await app.start("echo", {"b": 1, "a": [1.0]}, idempotency_key="py")
        # Equal as the Python client compares: key order aside; 1.0 and 1.00 are one float.
        again = "SELECT durably.start_run('echo', 'v1', '{}', idempotency_key => 'py');"
        assert await psql.ok(again.format('{"a": [1.00], "b": 1}')) == [python.run_id]
        for other in ('{"a": [1], "b": 1}', '{"a": [1.0]}', '{"a": [1.0], "b": true}'):
            err = await psql.fails(again.format(other))
            assert "ERROR:  23505: idempotency key 'py' already started run" in err, err
            assert f"{python.run_id} of 'echo' with a different input" in err, err
        [sql] = await psql.ok(
            "SELECT durably.start_run('echo', 'v1', '{\"b\": 1, \"a\": 2}',"
            " idempotency_key => 's');"
        )
        same = await app.start("echo", {"a": 2, "b": 1}, idempotency_key="s")
        assert same.run_id == sql
        assert len(await app.list_runs()) == 2


async def test_a_replay_sees_the_input_the_jsonb_held(psql: Psql) -> None:
    app = _app(psql.url)
    start = f"SELECT durably.start_run('park', 'v1', '{OBJECT}', idempotency_key => 'fid');"
    async with app, app.worker():
        [run_id] = await psql.ok(start)
        await eventually(lambda: _waiting(app, run_id), what="the run parked on its signal")
        sent = await psql.ok("SELECT durably.send_signal('go', '{\"ok\": 1}');")
        result = await app.handle(run_id).result(timeout=scaled(10))
        assert await psql.ok(start) == [run_id]  # the same jsonb, the same run
    # What jsonb makes of the text (shorter keys first, 1e2 an int, -0.0 a 0.0), live and
    # on the replay after the park alike.
    assert result["first"] == result["replayed"] == ["b", "mid", "zeta", "alpha"]
    assert result["value"] == {"b": True, "mid": [1.5, 100, 0.0], "zeta": 1,
                               "alpha": {"x": 1, "y": 2}}  # fmt: skip
    assert result["signal"] == {"ok": 1}
    assert sent == [f'{{"buffered": false, "duplicate": false, "delivered_to": ["{run_id}"]}}']


async def _waiting(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "waiting"


async def test_a_queued_start_keeps_to_the_queue_limits(psql: Psql) -> None:
    app = Durably(psql.url)
    queue = app.queue("q", concurrency=1)

    @app.workflow(name="job", version="v1", queue=queue)
    async def job(ctx: WorkflowContext, k: int) -> int:
        return k

    async with app:
        await QueueClaims(app.store).declare([queue])
        await psql.ok("\n".join(
            f"SELECT durably.start_run('job', 'v1', '{k}', queue => 'q');" for k in range(3)
        ))  # fmt: skip
        claims = QueueClaims(app.store)
        assert len(await claims.claim("q", "w", [("job", "v1")], 10, 30.0)) == 1
        assert await claims.claim("q", "w2", [("job", "v1")], 10, 30.0) == []
        assert await app.store.claim("w", [("job", "v1")], 10, 30.0) == []  # not unqueued
        counts = {c["name"]: c for c in await app.queue_counts()}
    assert (counts["q"]["running"], counts["q"]["waiting"]) == (1, 2)


async def test_a_queued_start_gets_the_workflows_retries(psql: Psql) -> None:
    # start_run cannot know the workflow's retry policy: it stores max_attempts 0, and the
    # queue's claim must bind it as the unqueued claim does (else one attempt in all).
    app = Durably(psql.url)
    queue = app.queue("q", concurrency=1)
    tries: list[int] = []

    @app.workflow(name="flaky", version="v1", queue=queue,
                  retry=RetryPolicy(max_attempts=3, initial_interval="10ms"))  # fmt: skip
    async def flaky(ctx: WorkflowContext, k: int) -> int:
        tries.append(k)
        if len(tries) == 1:
            raise RuntimeError("the first attempt fails")
        return k

    async with app, app.worker():
        [run_id] = await psql.ok("SELECT durably.start_run('flaky', 'v1', '7', queue => 'q');")
        assert await app.handle(run_id).result(timeout=scaled(20)) == 7
        run = await app.get_run(run_id)
    assert (run.status, run.attempts) == ("completed", 2)


async def test_bad_arguments_are_refused_and_write_nothing(psql: Psql) -> None:
    app = _app(psql.url)
    huge = "9" * 4301
    deep = '{"a": ' * 255 + "[]" + "}" * 255
    cases = {
        "SELECT durably.start_run('', 'v1', '1');":
            "22023: a workflow name must be a non-empty string, not ''",
        "SELECT durably.start_run(NULL, 'v1', '1');":
            "22023: a workflow name must be a non-empty string, not NULL",
        "SELECT durably.start_run('echo', NULL, '1', queue => 'q');":
            "22023: a run of workflow 'echo' started without a version cannot be queued",
        "SELECT durably.start_run('echo', 'v1', '1', queue => '');":
            "22023: a queue name must be a non-empty string",
        "SELECT durably.start_run('echo', 'v1', '1', namespace => '');":
            "22023: a namespace must be a non-empty string",
        # Deeper than the engine's readers go: a run no claim or listing could read.
        f"SELECT durably.start_run('echo', 'v1', '{deep}');":
            "22023: input of workflow 'echo' is nested more than 254 levels deep",
        f"SELECT durably.start_run('echo', 'v1', '[{huge}]');":
            "22023: input of workflow 'echo' is not JSON: it holds an integer of more than 4300",
        "SELECT durably.start_run('echo', 'v1', '{bad');": "22P02: invalid input syntax",
        "SELECT nosuch.start_run('echo', 'v1', '1');": '3F000: schema "nosuch" does not exist',
        "SELECT durably.start_run('echo', '1');": "42883: function durably.start_run",
        # Search attributes (0027): what `core.attributes` refuses.
        "SELECT durably.start_run('echo', 'v1', '1', attributes => '[1]');":
            "22023: attributes must be a JSON object of names to values, not array",
        "SELECT durably.start_run('echo', 'v1', '1', attributes => '{\"k\": null}');":
            "22023: the value of attribute 'k' is null",
        "SELECT durably.start_run('echo', 'v1', '1', attributes => '{\"k\": [1]}');":
            "22023: the value of attribute 'k' is array",
        "SELECT durably.start_run('echo', 'v1', '1', attributes => '{\"\": 1}');":
            "22023: an attribute key must be a non-empty string of at most 128",
        f"SELECT durably.start_run('echo', 'v1', '1', attributes => '{LONG}');":
            "22023: the value of attribute 'k' is a string of more than 1024",
        f"SELECT durably.start_run('echo', 'v1', '1', attributes => '{{\"k\": {1 << 63}}}');":
            "22023: the value of attribute 'k' is an integer beyond 64 bits",
    }  # fmt: skip
    async with app:
        for sql, error in cases.items():
            assert error in await psql.fails(f"BEGIN;\n{sql}\nCOMMIT;"), sql
        assert await app.list_runs() == []
        assert await app.queue_counts() == []
        # A float of as many digits is a float to Python's reader: taken.
        await psql.ok(f"SELECT durably.start_run('echo', 'v1', '[{huge}.5]');")
        # As deep as the Python client writes: taken, and read back.
        [run_id] = await psql.ok(f"SELECT durably.start_run('echo', 'v1', '{deep[5:-1]}');")
        assert (await app.get_run(run_id)).input is not None


async def test_a_start_with_attributes_is_found_by_them(psql: Psql) -> None:
    app = _app(psql.url)
    async with app:
        [run_id] = await psql.ok(
            "SELECT durably.start_run('echo', 'v1', '1',"
            ' attributes => \'{"customer": "c-1", "amount": 30, "vip": true}\');'
        )
        [plain] = await psql.ok("SELECT durably.start_run('echo', 'v1', '2', attributes => '{}');")
        found = await app.list_runs(attributes={"customer": "c-1", "amount": 30.0})
        assert [(r.run_id, r.attributes) for r in found] == [
            (run_id, {"customer": "c-1", "amount": 30, "vip": True})
        ]
        assert (await app.get_run(plain)).attributes == {}  # stored as none (NULL)
        # The previous form of the call (no attributes, positional) is the same function.
        [old] = await psql.ok(
            "SELECT durably.start_run('echo', 'v1', '3', NULL, NULL, NULL, NULL, NULL, 0,"
            " 'default');"
        )
        assert (await app.get_run(old)).attributes == {}


async def test_a_workflow_no_worker_serves_stays_pending(psql: Psql) -> None:
    app = _app(psql.url)
    async with app, app.worker():
        [run_id] = await psql.ok("SELECT durably.start_run('nobody', 'v9', '1');")
        await (await app.start("echo", 0)).result(timeout=scaled(10))  # a claim since
        run = await app.get_run(run_id)
        assert (run.status, run.attempts, run.version) == ("pending", 0, "v9")


@pytest.mark.parametrize("version", ["v1", "", None])
async def test_psql_sees_the_run_as_python_wrote_it(psql: Psql, version: str | None) -> None:
    app = _app(psql.url)
    arg = "NULL" if version is None else f"'{version}'"
    async with app:
        [run_id] = await psql.ok(
            f"SELECT durably.start_run('echo', {arg}, '{{\"x\": 1}}', "
            "available_at => now() + interval '1 hour', concurrency_key => 'ck', "
            "priority => 3);"
        )
        run = await app.get_run(run_id)
    assert (run.workflow, run.version, run.input) == ("echo", version or "", {"x": 1})
    assert (run.status, run.concurrency_key, run.priority) == ("pending", "ck", 3)
    assert run.available_at is not None and run.created_at is not None
    assert 3590 < (run.available_at - run.created_at).total_seconds() < 3610
