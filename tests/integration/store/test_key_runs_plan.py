"""A keyed start of a queue with a per-key strategy reads its key's live runs only (SPEC
§4.23), whatever the planner knew when it planned `key_runs`: planned generically on the
fresh, empty table (as the engine's connections plan it), then run after a burst of
pending runs of other queues and keys and a long history of the key's ended runs. The
pages it touches must not grow with them (see test_claim_plan.py for the method)."""

from __future__ import annotations

from typing import Any

import psycopg

from durably import Durably
from durably.backends import _queries
from durably.backends.postgres.connector import _configure_engine
from tests.integration.store.test_claim_plan import _pages
from tests.integration.store.test_history_size import PARAM, _numbered

SCHEMA = "keyplan"
ARGS = {"queue": "'search'", "key": "'user-1'", "id": "'new'"}


async def _key_runs_of(conn: psycopg.AsyncConnection[Any]) -> str:
    statements = _queries.load("durably.backends.postgres", "named")["key_runs"]
    sql, _ = _numbered(statements[0].replace("{schema}", SCHEMA))
    names = list(dict.fromkeys(PARAM.findall(statements[0])))
    await _configure_engine(conn)
    await conn.execute(f"PREPARE claim_of AS {sql}")  # the name `_pages` executes
    return f"({', '.join(ARGS[name] for name in names)})"


async def _insert(conn: psycopg.AsyncConnection[Any], tag: str, n: int, status: str,
                  queue: str, key: str) -> None:  # fmt: skip
    await conn.execute(f"""
        INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input,
            max_attempts, available_at, queue, concurrency_key)
        SELECT '{tag}-' || g, 'default', 'search', 'v1', '{status}', '1', 1,
            CASE WHEN '{status}' = 'pending' THEN now() END, '{queue}', {key}
        FROM generate_series(1, {n}) g""")


async def test_key_runs_reads_the_keys_live_runs_only(pg_url: str) -> None:
    async with Durably(pg_url, schema=SCHEMA):
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(f"ALTER TABLE {SCHEMA}.runs SET (autovacuum_enabled = false)")
        args = await _key_runs_of(conn)
        await _insert(conn, "mine", 3, "pending", "search", "'user-1'")
        before, found, scans_before = await _pages(conn, args)
        assert found == 3
        await _insert(conn, "others", 50_000, "pending", "search", "'u-' || g")
        await _insert(conn, "elsewhere", 50_000, "pending", "other", "'user-1'")
        await _insert(conn, "history", 50_000, "completed", "search", "'user-1'")
        after, found, scans_after = await _pages(conn, args)
        assert found == 3
    assert after < 2 * before + 10, (
        f"{before} pages before the burst ({scans_before}); {after} after ({scans_after})"
    )
