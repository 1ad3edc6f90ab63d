"""Migration 0019 on a database in use: the status `held` is allowed (and nothing else
more) for the rows already there, through connections opened before it, on both backends.
SQLite cannot alter a CHECK: 0019 edits the table's stored definition in place."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from durably import Durably
from durably.backends import _queries

_SHIPPED = _queries.migrations


class _Raw:
    """A connection of another process, opened (and its schema read) before 0019."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            self.conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self.table = "durably_runs"
        else:
            self.conn = psycopg.connect(url, autocommit=True)
            self.table = "durably.runs"
        self.execute(f"SELECT count(*) FROM {self.table}")

    def execute(self, sql: str, *params: Any) -> list[Any]:
        sql = sql if self.sqlite else sql.replace("?", "%s")
        cur = self.conn.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []


async def test_0019_allows_held_for_runs_already_there(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_queries, "migrations", lambda p: [m for m in _SHIPPED(p) if m[0] < 19])
    await Durably(db_url, migrate=False).migrate()
    raw = _Raw(db_url)
    run_id = "r-old"  # as the release before 0019 inserted it (this code writes newer columns)
    try:
        raw.execute(f"INSERT INTO {raw.table} (id, namespace, workflow, version, status, input)"
                    " VALUES (?, 'default', 'w', 'v1', 'pending', 'null')", run_id)  # fmt: skip
        monkeypatch.setattr(_queries, "migrations", _SHIPPED)
        # 0020 adds columns after 0019's edit of the stored definition (SQLite).
        applied = await Durably(db_url, migrate=False).migrate()
        assert applied[:2] == ["0019_held.sql", "0020_parked_on.sql"]
        raw.execute(f"UPDATE {raw.table} SET status = 'held', holds = holds + 1, "
                    "parked_fence = 7 WHERE id = ?", run_id)  # fmt: skip
        rows = raw.execute(
            f"SELECT status, holds, parked_on, parked_fence FROM {raw.table} WHERE id = ?", run_id
        )
        assert [tuple(r) for r in rows] == [("held", 1, None, 7)]
        error = sqlite3.IntegrityError if raw.sqlite else psycopg.errors.CheckViolation
        with pytest.raises(error):
            raw.execute(f"UPDATE {raw.table} SET status = 'sleeping' WHERE id = ?", run_id)
        if raw.sqlite:
            assert raw.execute("PRAGMA integrity_check") == [("ok",)]
    finally:
        raw.conn.close()
