"""The engine's statements are never JIT-compiled. Its connections plan each statement
once with `enable_seqscan = off` (see `_configure_engine`), so a statement whose only way
is a scan (`queues`, `workers`: a few rows) is costed near 1e10, over any `jit_above_cost`:
on a server with JIT on, `next_due`, which an idle worker runs after every empty claim,
was compiled on each call, 95-104 ms of the server's time for 0.25 ms of work, and the
claim loop waited on it (found by `bench latency --trace`)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from durably import Durably
from durably.backends import _queries
from durably.backends.postgres.connector import _configure_engine
from tests.integration.store.test_history_size import PARAM, _numbered

SCHEMA = "nojit"


def _jit(node: Any) -> bool:
    """Whether an EXPLAIN (FORMAT JSON) document reports JIT anywhere."""
    if isinstance(node, dict):
        return "JIT" in node or any(_jit(v) for v in node.values())
    return isinstance(node, list) and any(_jit(v) for v in node)


async def test_the_engines_statements_are_not_jit_compiled(pg_url: str) -> None:
    async with Durably(pg_url, schema=SCHEMA):
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        # A server with JIT on (as Debian's is), which would compile anything costly.
        await conn.execute("SET jit = on")
        await conn.execute("SET jit_above_cost = 1000")
        # (true while `jit` is on, so asked before the engine's settings)
        available = await (await conn.execute("SELECT pg_jit_available()")).fetchone()
        await _configure_engine(conn)
        row = await (await conn.execute("SHOW jit")).fetchone()
        assert row is not None and row[0] == "off"
        if not (available and available[0]):
            pytest.skip("this server has no JIT to leave unused (PostgreSQL without LLVM)")
        [statement] = _queries.load("durably.backends.postgres", "named")["next_due"]
        sql, _ = _numbered(statement.replace("{schema}", SCHEMA))
        names = list(dict.fromkeys(PARAM.findall(statement)))  # as _numbered numbers them
        await conn.execute(f"PREPARE due AS {sql}")
        args = {"workflows": "ARRAY['flow']", "versions": "ARRAY['v1']",
                "namespace": "'default'"}  # fmt: skip
        cur = await conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE due({', '.join(args[n] for n in names)})"
        )
        plan = (await cur.fetchone() or [None])[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        assert not _jit(plan), plan
