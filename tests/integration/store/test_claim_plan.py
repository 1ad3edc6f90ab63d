"""A claim reads the runs of the pairs it serves, whatever the planner knew when it planned
it (issue 26 item 15). The engine's connections plan a statement once, generically, and
keep that plan for their life: a burst of runs that no worker serves arrives after it, and
nothing re-plans the claim until ANALYZE runs (never here: autovacuum is off). The claim is
run through its plan by EXPLAIN (ANALYZE, BUFFERS), rolled back: the pages it touches to
claim 10 runs must not grow with the burst."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from durably import Durably
from durably.backends import _queries
from durably.backends.postgres.connector import _configure_engine
from tests.integration.store.test_history_size import PARAM, _numbered

SCHEMA = "claimplan"
BURST = 100_000  # pending runs of (flow, v1), which no worker serves, due before the rest
OWN = 20  # pending runs of (flow, v2), the served pair
# The claim's parameters, as a worker serving (flow, v2) with 10 free slots sends them: with
# (flow, ''), the runs thin clients start by name, which it binds to v2 (`worker.byname`).
ARGS = {"namespace": "'default'", "workflows": "ARRAY['flow', 'flow']",
        "versions": "ARRAY['v2', '']", "binds": "ARRAY['v2', 'v2']",
        "max_attempts": "ARRAY[1, 1]", "held": "ARRAY[]::text[]", "limit": "10",
        "worker_id": "'w'", "lease": "30"}  # fmt: skip


async def _runs(
    conn: psycopg.AsyncConnection[Any], version: str, n: int, ago: str, clients: int = 4
) -> None:
    """`n` pending runs of (flow, `version`) as `start` writes them, due from `ago` on, as
    `clients` clients start them at once, in a transaction each."""
    prefix = f"{version}-{ago.replace(' ', '')}"
    for part in range(clients):
        await conn.execute(f"""
            INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input,
                max_attempts, available_at)
            SELECT '{prefix}-{part}-' || g, 'default', 'flow', '{version}', 'pending', '1', 1,
                   now() - interval '{ago}' + ({clients} * g + {part}) * interval '1 millisecond'
            FROM generate_series(1, {n // clients}) g""")


async def _claim_of(conn: psycopg.AsyncConnection[Any]) -> str:
    """The claim prepared on `conn`, configured as the engine's connections are; the
    arguments of an EXECUTE of it."""
    statements = _queries.load("durably.backends.postgres", "named")["claim"]
    assert len(statements) == 1
    sql, _ = _numbered(statements[0].replace("{schema}", SCHEMA))
    names = list(dict.fromkeys(PARAM.findall(statements[0])))  # as _numbered numbers them
    await _configure_engine(conn)
    await conn.execute(f"PREPARE claim_of AS {sql}")
    return f"({', '.join(ARGS[name] for name in names)})"


async def _pages(conn: psycopg.AsyncConnection[Any], args: str) -> tuple[int, int, str]:
    """Pages touched and runs claimed by one claim through the prepared plan (planned
    generically at its first EXECUTE, as the engine's are), rolled back; its scans of runs."""
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim_of{args}")
        row = await cur.fetchone()
    assert row is not None
    plan = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]["Plan"]
    pages = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    return pages, plan["Actual Rows"], "; ".join(_scans(plan))


def _scans(node: dict[str, Any]) -> list[str]:
    found = []
    if node.get("Relation Name") == "runs":
        removed = node.get("Rows Removed by Filter", 0)
        found.append(f"{node['Node Type']} {node.get('Index Name', '')} removed={removed}")
    for child in node.get("Plans", []):
        found += _scans(child)
    return found


@pytest.mark.parametrize("planned", ["on an empty table", "with statistics of served runs"])
async def test_a_burst_of_unserved_runs_does_not_slow_the_claim(pg_url: str, planned: str) -> None:
    """Planned on the fresh, empty table (a worker started before any run: the planner
    counted a few pages of runs, and read them all to update the runs claimed), or with
    statistics taken while a backlog of the served pair was due (every due run looked like
    one the claim wants, so any index in available_at order seemed as good as the pair's
    range: it read the burst's runs to find the pair's)."""
    async with Durably(pg_url, schema=SCHEMA):
        pass  # the schema
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(f"ALTER TABLE {SCHEMA}.runs SET (autovacuum_enabled = false)")
        args = await _claim_of(conn)
        if planned == "on an empty table":
            assert (await _pages(conn, args))[1] == 0  # planned here, claiming nothing
            await _runs(conn, "v2", OWN, ago="1 minute")
        else:  # analyzed with a backlog of the served pair, drained since; started in
            # order (available_at follows the table's order: reading by it looks cheap)
            await _runs(conn, "v2", 1000, ago="2 hours", clients=1)
            await conn.execute(f"ANALYZE {SCHEMA}.runs")
            await conn.execute(
                f"UPDATE {SCHEMA}.runs SET status = 'completed', available_at = NULL"
            )
            await _runs(conn, "v2", OWN, ago="1 minute")
        before, claimed, scans_before = await _pages(conn, args)
        assert claimed == 10
        await _runs(conn, "v1", BURST, ago="1 hour")  # older: first in available_at order
        after, claimed, scans_after = await _pages(conn, args)
        assert claimed == 10
        # A connection opened since (the pool grows under load) plans it now, with the
        # table's size as it is and the statistics as they were.
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as late:
            fresh, claimed, scans_fresh = await _pages(late, await _claim_of(late))
            assert claimed == 10
    assert after < 2 * before and fresh < 2 * before, (
        f"{before} pages before a burst of {BURST} unserved runs ({scans_before}); after "
        f"it, {after} planned before ({scans_after}), {fresh} planned after ({scans_fresh})"
    )
