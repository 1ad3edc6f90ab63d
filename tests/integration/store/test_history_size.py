"""A worker's statements read the rows of the runs they work on, not the whole history: a
table of finished runs does not slow it down. Rows read are counted by PostgreSQL itself
(pg_stat_user_tables), so a plan that walks every run shows whatever its speed."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import psycopg

from durably import Durably
from durably.backends.postgres.connector import _configure_engine
from tests.helpers import duration, eventually

SCHEMA = "history"
FINISHED = 20_000  # a third of them children of the others
PARKED = 5_000  # waiting for signals that never come
RUNS = 10  # parents (of a queue, sleeping), each with a child, beside as many signal waits


async def _double(x: int) -> int:
    return 2 * x


async def _one(conn: psycopg.AsyncConnection[Any], query: str, *params: Any) -> Any:
    row = await (await conn.execute(query, params)).fetchone()
    assert row is not None
    return row[0]


def _app(url: str) -> Durably:
    app = Durably(url, schema=SCHEMA)

    @app.workflow(name="child")
    async def child(ctx: Any, x: int) -> int:
        return int(await ctx.step.run("double", _double, x))

    @app.workflow(name="parent", queue=app.queue("parents", concurrency=5))
    async def parent(ctx: Any, x: int) -> int:
        await ctx.step.sleep("breathe", "10ms")
        y = await ctx.step.run("double", _double, x)
        return int(await ctx.step.run_workflow(child, y))

    @app.workflow(name="waiter")
    async def waiter(ctx: Any, topic: str) -> Any:
        return await ctx.step.wait_for_signal(topic, timeout=duration(60))

    return app


async def _rows_read(conn: psycopg.AsyncConnection[Any]) -> int:
    """Rows read from runs and step_attempts so far, once every other session of the
    database has ended (a session's counts reach the statistics when it ends)."""

    async def alone() -> bool:
        others = await _one(
            conn,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        return bool(others == 0)

    await eventually(alone, what="the app's sessions to end")
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    read = await _one(
        conn, "SELECT sum(seq_tup_read + coalesce(idx_tup_fetch, 0)) FROM pg_stat_user_tables"
        " WHERE schemaname = %s AND relname IN ('runs', 'step_attempts')", SCHEMA,
    )  # fmt: skip
    return int(read)


async def _fill(conn: psycopg.AsyncConnection[Any]) -> None:
    # Autovacuum's own reads of the new rows would count as the engine's.
    for table in ("runs", "step_attempts", "signals"):
        await conn.execute(f"ALTER TABLE {SCHEMA}.{table} SET (autovacuum_enabled = false)")
    await conn.execute(f"""
        INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input, output,
            attempts, created_at, started_at, finished_at, parent_run_id)
        SELECT 'done-' || g, 'default', 'parent', 'v1', 'completed', '1', '2', 1,
               now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour',
               CASE WHEN g % 3 = 0 THEN 'done-' || (g - 1) END
        FROM generate_series(1, {FINISHED}) g""")
    await conn.execute(f"""
        INSERT INTO {SCHEMA}.step_attempts (run_id, position, attempt, step, kind, status,
            final, fence, output, started_at, finished_at, seq)
        SELECT 'done-' || g, 1, 1, 'double', 'function', 'completed', true, 1, '2',
               now() - interval '1 hour', now() - interval '1 hour', 1
        FROM generate_series(1, {FINISHED}) g""")
    # Runs parked on signals nobody sends: their waits are running attempts.
    await conn.execute(f"""
        INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input, attempts,
            created_at, started_at, waiting_for)
        SELECT 'parked-' || g, 'default', 'waiter', 'v1', 'waiting', '"x"', 1,
               now() - interval '1 hour', now() - interval '1 hour', 'signal:nobody-' || g
        FROM generate_series(1, {PARKED}) g""")
    await conn.execute(f"""
        INSERT INTO {SCHEMA}.step_attempts (run_id, position, attempt, step, kind, status,
            final, fence, signal, started_at)
        SELECT 'parked-' || g, 1, 1, 'nobody-' || g, 'signal-wait', 'running', false, 1,
               'nobody-' || g, now() - interval '1 hour'
        FROM generate_series(1, {PARKED}) g""")
    # Signals the finished runs consumed, and some left in parked runs' own buffers.
    await conn.execute(f"""
        INSERT INTO {SCHEMA}.signals (namespace, name, data, delivered_to, buffered,
            consumed_by, consumed_at, run_id, created_at)
        SELECT 'default', 'old-' || g, '1', '[]', true,
               CASE WHEN g % 5 <> 0 THEN 'done-' || g END,
               CASE WHEN g % 5 <> 0 THEN now() - interval '1 hour' END,
               CASE WHEN g % 5 = 0 THEN 'parked-' || g END, now() - interval '1 hour'
        FROM generate_series(1, {PARKED}) g""")
    await conn.execute(f"ANALYZE {SCHEMA}.signals")
    await conn.execute(f"ANALYZE {SCHEMA}.runs")
    await conn.execute(f"ANALYZE {SCHEMA}.step_attempts")


async def test_a_worker_reads_only_the_runs_it_works_on(pg_url: str) -> None:
    app = _app(pg_url)
    async with app:
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await _fill(conn)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        before = await _rows_read(conn)
        app = _app(pg_url)
        async with app, app.worker(concurrency=10):
            waiting = [await app.start("waiter", f"topic-{i}") for i in range(RUNS)]
            parents = [await app.start("parent", i) for i in range(RUNS)]
            for k, handle in enumerate(parents):
                assert await handle.result(timeout=duration(30)) == 4 * k
            for handle in waiting:
                await eventually(partial(_waiting, handle), what="the wait to park")
            for i in range(RUNS):
                await app.send_signal(f"topic-{i}", i)
            for i, handle in enumerate(waiting):
                assert await handle.result(timeout=duration(30)) == i
        read = await _rows_read(conn) - before
    # About 3 runs and 4 attempts a run are worked on: a statement that walked the
    # history once would read FINISHED rows by itself.
    ran = 3 * RUNS
    assert read < FINISHED / 4, f"{read} rows read to run {ran} runs beside {FINISHED} finished"


async def _waiting(handle: Any) -> bool:
    return bool(await handle.status() == "waiting")


# Statements that list or count for an operator (their cost is the answer's size) and those
# that read the small tables (workers, queues, signals by name) may read whole tables.
OPERATOR = {"list_runs", "metrics", "find_runs_by_prefix", "list_signals", "purge_signals",
            "list_workers", "worker_gone", "list_tables"}  # fmt: skip
HISTORY = ("_runs", "_step_attempts", "_signals")
ALIAS = re.compile(r"durably(?:_runs|_step_attempts|_signals)\b\s+(?:AS\s+)?([a-z]\w*)")


def test_no_sqlite_statement_of_the_engine_reads_a_whole_history_table(tmp_path: Any) -> None:
    """SQLite's plans do not depend on the data: every engine statement's plan is checked
    for a scan of runs, step attempts or signals (not a search by index)."""
    import asyncio
    import sqlite3

    from durably.backends import _queries

    path = tmp_path / "plans.db"

    async def create() -> None:
        async with Durably(f"sqlite:///{path}"):
            pass

    asyncio.run(create())
    conn = sqlite3.connect(path)
    conn.create_function("now", 0, lambda: 0.0)
    scans = []
    for name, statements in _queries.load("durably.backends.sqlite", "named").items():
        if name in OPERATOR:
            continue
        for statement in statements:
            sql = statement.replace("{schema}", "durably")
            params = dict.fromkeys(re.findall(r":(\w+)", sql))
            # The tables, and their aliases (lower case; the SQL's own words are upper case).
            tables = {f"durably{t}" for t in HISTORY} | set(ALIAS.findall(sql))
            for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params):
                words = row[3].split()
                if words[0] == "SCAN" and words[1] in tables and "VIRTUAL" not in words:
                    scans.append(f"{name}: {row[3]}")
    assert not scans, scans


async def test_no_postgresql_statement_of_the_engine_reads_a_whole_history_table(
    pg_url: str,
) -> None:
    """The engine's connections plan its statements generically: with the statistics of a
    table of history, each such plan reads runs, step attempts and signals through an
    index condition, never a whole table or index."""
    async with _app(pg_url):
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await _fill(conn)
        whole = await _whole_reads_of_the_engine(conn)
    assert not whole, whole


async def test_no_postgresql_statement_planned_on_an_empty_schema_reads_a_whole_table(
    pg_url: str,
) -> None:
    """A connection keeps its plans for its life: those made on a fresh schema (the planner
    counts a few pages of each table) are still the plans once the tables hold millions of
    rows, and no ANALYZE re-plans them while autovacuum is off or behind (issue 26 item
    15). They read by index conditions too."""
    async with _app(pg_url):
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        # purge_addressed (a retention batch) reads signals_buffered whole: left for now
        whole = await _whole_reads_of_the_engine(conn, skip={"purge_addressed"})
    assert not whole, whole


async def _whole_reads_of_the_engine(
    conn: psycopg.AsyncConnection[Any], skip: frozenset[str] | set[str] = frozenset()
) -> list[str]:
    """The whole reads of a history table or index in the generic plan of each engine
    statement, planned on `conn` as the engine's connections plan."""
    import json

    from durably.backends import _queries

    package = "durably.backends.postgres"
    skipped = OPERATOR | _queries.marked(package, "plan: each call") | set(skip)
    whole = []
    await _configure_engine(conn)  # planned as the engine's connections plan
    for name, statements in _queries.load(package, "named").items():
        if name in skipped:
            continue
        for statement in statements:
            sql, arity = _numbered(statement.replace("{schema}", SCHEMA))
            await conn.execute(f"PREPARE plan_of AS {sql}")
            args = f"({', '.join(['NULL'] * arity)})" if arity else ""
            plan = await _one(conn, f"EXPLAIN (FORMAT JSON) EXECUTE plan_of{args}")
            await conn.execute("DEALLOCATE plan_of")
            tree = plan if isinstance(plan, list) else json.loads(plan)
            whole += [f"{name}: {scan}" for scan in _whole_reads(tree[0]["Plan"])]
    return whole


PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def _numbered(sql: str) -> tuple[str, int]:
    """`sql` with its `:name` parameters as `$1`, `$2`…, and how many there are."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return PARAM.sub(number, sql), len(names)


def _whole_reads(node: dict[str, Any]) -> list[str]:
    """The scans of `node`'s tree that read a history table or index whole."""
    found = []
    if node.get("Relation Name") in ("runs", "step_attempts", "signals"):
        kind = node["Node Type"]
        if kind == "Seq Scan" or (kind.startswith("Index") and "Index Cond" not in node):
            found.append(f"{kind} on {node['Relation Name']} {node.get('Index Name', '')}")
    for child in node.get("Plans", []):
        found += _whole_reads(child)
    return found


async def test_an_operator_query_is_planned_with_its_parameters(pg_url: str) -> None:
    """The engine's connections plan generically; a query whose plan depends on its
    parameters (`-- plan: each call`: optional filters) must not: listing the few failed
    runs among many reads about as many rows as it returns."""
    async with _app(pg_url):
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await _fill(conn)
        await conn.execute(f"UPDATE {SCHEMA}.runs SET status = 'failed' WHERE id LIKE 'done-%00'")
        await conn.execute(f"ANALYZE {SCHEMA}.runs")
    # Measured from a session of its own: the filling one's reads reach the statistics as
    # it ends, not at once.
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        before = await _rows_read(conn)
        app = _app(pg_url)
        async with app:
            for _ in range(7):  # past PostgreSQL's five custom plans of a prepared statement
                failed = await app.list_runs(status="failed", limit=1000)
        read = await _rows_read(conn) - before
    assert len(failed) == FINISHED // 100
    assert read < 7 * 2 * len(failed), f"{read} rows read to list {len(failed)} runs 7 times"


async def test_a_signal_sent_to_one_run_reads_that_runs_waits_only(pg_url: str) -> None:
    """Many runs wait on one name; a send addressed to one of them reads its waits, not
    every wait on the name (one generic plan serves both kinds of send)."""
    async with _app(pg_url):
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        for table in ("runs", "step_attempts"):  # see _fill
            await conn.execute(f"ALTER TABLE {SCHEMA}.{table} SET (autovacuum_enabled = false)")
        await conn.execute(f"""
            INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input,
                attempts, created_at, started_at, waiting_for)
            SELECT 'approver-' || g, 'default', 'waiter', 'v1', 'waiting', '"x"', 1, now(),
                   now(), 'signal:approval'
            FROM generate_series(1, {PARKED}) g""")
        await conn.execute(f"""
            INSERT INTO {SCHEMA}.step_attempts (run_id, position, attempt, step, kind,
                status, final, fence, signal, started_at)
            SELECT 'approver-' || g, 1, 1, 'approval', 'signal-wait', 'running', false, 1,
                   'approval', now()
            FROM generate_series(1, {PARKED}) g""")
        await conn.execute(f"ANALYZE {SCHEMA}.runs")
        await conn.execute(f"ANALYZE {SCHEMA}.step_attempts")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        before = await _rows_read(conn)  # from a session of its own (see above)
        async with _app(pg_url) as app:
            sent = await app.send_signal("approval", {"ok": True}, run_id="approver-77")
        read = await _rows_read(conn) - before
    assert sent["delivered_to"] == ["approver-77"]
    assert read < PARKED / 10, f"{read} rows read to send to one of {PARKED} waiting runs"


async def test_no_engine_statement_reads_runs_by_status_after_a_burst(pg_url: str) -> None:
    """Runs analyzed while finished, then started in a burst the statistics have not seen:
    the engine's statements still look runs up by id, never through runs_status (the
    statistics call 'running' rare; that index would read every running run)."""
    from durably.backends import _queries

    async with _app(pg_url):
        pass  # the schema
    package = "durably.backends.postgres"
    by_status = []
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(f"ALTER TABLE {SCHEMA}.runs SET (autovacuum_enabled = false)")
        await conn.execute(f"""
            INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input,
                attempts, created_at, fence, worker_id, lease_expires_at, parent_run_id)
            SELECT 'r-' || g, 'default', 'waiter', 'v1', 'completed', '1', 1, now(), 1, 'w',
                   now() + interval '1 hour', CASE WHEN g % 2 = 0 THEN 'r-' || (g - 1) END
            FROM generate_series(1, {FINISHED}) g""")
        await conn.execute(f"ANALYZE {SCHEMA}.runs")
        await conn.execute(f"UPDATE {SCHEMA}.runs SET status = 'running'")  # the burst
        await _configure_engine(conn)  # planned as the engine's connections plan
        # Counting running runs per queue is what runs_status is for.
        skipped = OPERATOR | _queries.marked(package, "plan: each call") | {"queue_counts"}
        for name, statements in _queries.load(package, "named").items():
            if name in skipped:
                continue
            for statement in statements:
                sql, arity = _numbered(statement.replace("{schema}", SCHEMA))
                await conn.execute(f"PREPARE plan_of AS {sql}")
                args = f"({', '.join(['NULL'] * arity)})" if arity else ""
                rows = await (await conn.execute(f"EXPLAIN EXECUTE plan_of{args}")).fetchall()
                await conn.execute("DEALLOCATE plan_of")
                if any("runs_status" in row[0] for row in rows):
                    by_status.append(name)
    assert not by_status, by_status
