"""The SQL functions and the Python client keep one set of rules (issue 30): `start_run`
inserts with the statement the client's `insert_run` query runs, writing the same row,
queue row and NOTIFY; `same_json` compares inputs as `codec.canonical` does."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durably.backends import _queries, connect
from durably.backends.postgres.migrator import Migrator
from durably.core.clock import Clock
from durably.core.codec import canonical
from durably.store.records import NewRun
from durably.store.store import Store
from tests.helpers import scaled
from tests.integration.sql.conftest import Psql

PACKAGE = "durably.backends.postgres"


def _normal(sql: str) -> str:
    lines = (line for line in sql.splitlines() if not line.strip().startswith("--"))
    return re.sub(r"\s+", " ", " ".join(lines)).replace("( ", "(").replace(" )", ")").strip()


def test_the_insert_run_function_is_the_named_query() -> None:
    [query] = _queries.load(PACKAGE, "named")["insert_run"]
    # The function as the newest migration that (re)creates it made it (0021, then 0027).
    [*_, text] = [t for _, _, t in _queries.migrations(PACKAGE)
                  if "FUNCTION {schema}.insert_run(" in t]  # fmt: skip
    body = text.split("FUNCTION {schema}.insert_run(", 1)[1].split("RETURN QUERY", 1)[1]
    function = _normal(body.split("SELECT ins.* FROM ins,", 1)[0]).replace("insert_run.", ":")
    # All but the final SELECT: the function returns the rows of the table alone.
    assert _normal(query).split(" SELECT ins.*, (SELECT count(*)")[0] == function


_ARGS: list[dict[str, Any]] = [
    {"version": "", "input": '{"a": 1}'},
    {"version": "v1", "input": "[1, 2.5]", "idempotency_key": "k", "priority": 4},
    {"version": "v1", "input": "1", "queue": "q", "concurrency_key": "ck"},
    {"version": "v1", "input": "null", "available_at": "future"},
    {"version": "v1", "input": '"x"', "available_at": "future", "deadline_at": "soon"},
    {"version": "", "input": "true", "available_at": "past"},
    {"version": "v1", "input": "{}", "attributes": '{"customer":"c-1","n":30,"vip":true}'},
]
_SKIP = {"id", "created_at", "updated_at", "available_at"}


@pytest.fixture
def migrated(pg_url: str) -> str:
    asyncio.run(Migrator(pg_url, "durably").migrate())
    return pg_url


@pytest.mark.parametrize("args", _ARGS)
async def test_python_and_sql_starts_write_the_same(
    psql: Psql, migrated: str, args: dict[str, Any]
) -> None:
    now = datetime.now(UTC)
    at = {"future": now + timedelta(hours=1), "past": now - timedelta(hours=1),
          "soon": now + timedelta(minutes=1), None: None}  # fmt: skip
    new = NewRun(
        workflow="wf", version=args["version"], input_json=args["input"], max_attempts=0,
        idempotency_key=args.get("idempotency_key"), queue=args.get("queue"),
        available_at=at[args.get("available_at")], deadline_at=at[args.get("deadline_at")],
        concurrency_key=args.get("concurrency_key"), priority=args.get("priority", 0),
        attributes_json=args.get("attributes"),
    )  # fmt: skip
    connector = connect(migrated, "durably", Clock())
    async with (
        await psycopg.AsyncConnection.connect(migrated, autocommit=True) as listener,
        await psycopg.AsyncConnection.connect(migrated, autocommit=True) as conn,
    ):
        await listener.execute("LISTEN durably_durably")
        try:
            python, _ = await Store(connector, "default").create_run(new)
        finally:
            await connector.close()
        written = [await _written(conn, python.run_id)]
        [(sql,)] = await (await conn.execute(
            "SELECT durably.start_run(%s, %s, CAST(%s AS jsonb), %s, %s, %s, %s, %s, %s,"
            " attributes => CAST(%s AS jsonb))",
            (new.workflow, new.version, new.input_json, new.idempotency_key, new.queue,
             new.available_at, new.deadline_at, new.concurrency_key, new.priority,
             new.attributes_json),
        )).fetchall()  # fmt: skip
        written.append(await _written(conn, sql))
        await conn.execute("NOTIFY durably_durably, 'end'")  # after theirs, in commit order
        notified = []
        async for note in listener.notifies(timeout=scaled(10)):
            if note.payload == "end":
                break
            notified.append(note.payload)
    (a, queues_a), (b, queues_b) = written
    assert {k: v for k, v in a.items() if k not in _SKIP} == {
        k: v for k, v in b.items() if k not in _SKIP
    }
    if new.available_at is not None:
        expected = min(new.available_at, new.deadline_at or new.available_at)
        assert a["available_at"] == b["available_at"] == expected
    assert queues_a == queues_b == ([new.queue] if new.queue else [])
    due = new.available_at is None or new.available_at <= now
    assert notified == (["run", "run"] if due else [])


async def _written(
    conn: psycopg.AsyncConnection[Any], run_id: str
) -> tuple[dict[str, Any], list[str]]:
    """The run's row and the queues' names, then both deleted (the next start makes them
    anew, with the same idempotency key)."""
    cur = await conn.execute("SELECT * FROM durably.runs WHERE id = %s", (run_id,))
    assert cur.description is not None
    row = dict(zip([c.name for c in cur.description], await cur.fetchone() or (), strict=True))
    queues = [
        r[0] for r in await (await conn.execute("SELECT name FROM durably.queues")).fetchall()
    ]
    await conn.execute("DELETE FROM durably.runs; DELETE FROM durably.queues")
    return row, queues


# ----------------------------------------------------------------- same_json


_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=4)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e23, 5e-324, 1.7976931348623157e308, -0.0, 0.0, 0.1, 1e16, 2.0**63, 100.0]
)
_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _FLOATS | _TEXT
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=10,
)


def _float_text(f: float, style: int) -> str:
    """One of the texts Python's reader takes as `f`."""
    text = [repr(f), f"{f:.17g}", f"{f:.17E}"][style]
    return text if re.search(r"[.eEn]", text) else f"{text}.0"


def _write(value: Any, draw: Any) -> str:
    """JSON text of `value`, in one of the many ways of writing it: keys in any order, a
    duplicate key before the one that wins, floats in other notations, escapes."""
    if isinstance(value, dict):
        items = draw(st.permutations(list(value.items())))
        parts = [f"{json.dumps(k)}: {_write(v, draw)}" for k, v in items]
        if items and draw(st.booleans()):
            parts.insert(0, f"{json.dumps(items[-1][0])}: 0")  # loses to the later one
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_write(v, draw) for v in value) + "]"
    if isinstance(value, float):
        return _float_text(value, draw(st.integers(0, 2)))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=draw(st.booleans()))
    return json.dumps(value)


def _mutate(value: Any, draw: Any) -> Any:
    """`value` with one leaf changed in a way a careless comparison would miss."""
    if isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutate(value[key], draw)}
    if isinstance(value, list) and value:
        i = draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate(value[i], draw), *value[i + 1 :]]
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return float(value) if abs(value) < 2**53 else value + 1
    if isinstance(value, float):
        return -value if value == 0 else (int(value) if value.is_integer() else value * 3)
    if value is None:
        return False
    if isinstance(value, str):
        return value + "x"
    return [value]


@pytest.fixture
def db(migrated: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(migrated, autocommit=True) as conn:
        yield conn


def _same(db: psycopg.Connection[Any], a: str, b: str) -> bool:
    row = db.execute("SELECT durably.same_json(CAST(%s AS json), CAST(%s AS json))", (a, b))
    return bool(row.fetchone()[0])  # type: ignore[index]


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(value=_JSON, data=st.data())
def test_same_json_agrees_with_canonical(
    db: psycopg.Connection[Any], value: Any, data: st.DataObject
) -> None:
    other = data.draw(st.sampled_from([value, _mutate(value, data.draw)]))
    a, b = _write(value, data.draw), _write(other, data.draw)
    assert _same(db, a, b) == (canonical(json.loads(a)) == canonical(json.loads(b))), (a, b)


@pytest.mark.parametrize("a, b, equal", [
    ("1", "1.0", False), ("1.0", "1.00", True), ("1e2", "100.0", True), ("1e2", "100", False),
    ("-0.0", "0.0", False), ("-0", "0", True), ("1e400", "2e400", True), ("1e400", "-1e400", False),
    ("1e-400", "0.0", True), ("-1e-400", "-0.0", True), ("-1e-400", "0.0", False),
    ("0.1", "0.10000000000000001", True), ("123456789012345678901", "123456789012345678902", False),
    ('{"a": 1, "a": 2}', '{"a": 2}', True), ('{"a": 1, "a": 2}', '{"a": 1}', False),
    ("[1, 2]", "[2, 1]", False), ("true", "1", False), ("null", "false", False),
    ('"\\u00e9"', '"é"', True), ('{"a": {}}', '{"a": []}', False), ('{}', '{"a": null}', False),
])  # fmt: skip
def test_same_json_edges(db: psycopg.Connection[Any], a: str, b: str, equal: bool) -> None:
    assert (canonical(json.loads(a)) == canonical(json.loads(b))) is equal
    assert _same(db, a, b) is equal
