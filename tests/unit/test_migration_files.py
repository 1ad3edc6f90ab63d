"""A migration outside a transaction is run again from the top after a crash half-way:
each of its statements must be a no-op once done. SQLite has no such migration."""

from __future__ import annotations

import re

import pytest

from durably.backends import _queries

_CONCURRENT = re.compile(r"\bCONCURRENTLY\b", re.IGNORECASE)
_IDEMPOTENT = re.compile(
    r"^(CREATE (UNIQUE )?INDEX CONCURRENTLY IF NOT EXISTS|DROP INDEX CONCURRENTLY IF EXISTS"
    r"|ALTER TABLE \S+ ADD COLUMN IF NOT EXISTS)\s",
    re.IGNORECASE,
)


def _outside(package: str) -> list[tuple[str, str]]:
    return [(name, text) for _, name, text in _queries.migrations(package)
            if _queries.outside_transaction(text)]  # fmt: skip


def test_postgres_builds_the_claim_and_debounce_indexes_outside_a_transaction() -> None:
    names = [name for name, _ in _outside("durably.backends.postgres")]
    assert names == ["0011_claim_by_namespace.sql", "0018_due_by_status.sql", "0025_debounce.sql"]


@pytest.mark.parametrize("name, text", _outside("durably.backends.postgres"))
def test_each_statement_outside_a_transaction_can_run_again(name: str, text: str) -> None:
    for statement in _queries.statements(text):
        assert _IDEMPOTENT.match(statement), f"{name}: {statement}"


def test_postgres_builds_concurrently_only_outside_a_transaction() -> None:
    for _, name, text in _queries.migrations("durably.backends.postgres"):
        if not _queries.outside_transaction(text):
            head, _ = _queries.then_outside(text)
            assert not _CONCURRENT.search(" ".join(_queries.statements(head))), name


def _then_outside(package: str) -> list[tuple[str, str, str]]:
    found = []
    for _, name, text in _queries.migrations(package):
        head, tail = _queries.then_outside(text)
        if tail is not None:
            found.append((name, head, tail))
    return found


def test_a_migration_with_a_part_outside_can_run_again_from_the_top() -> None:
    """Stopped between its parts, it is not recorded: its transaction's part runs again
    (each statement a no-op once done), then its part outside (see the migrator)."""
    found = _then_outside("durably.backends.postgres")
    assert [name for name, _, _ in found] == ["0027_attributes.sql"]
    again = re.compile(
        r"^\s*(ALTER TABLE \S+ ADD COLUMN IF NOT EXISTS|CREATE OR REPLACE FUNCTION"
        r"|DROP FUNCTION IF EXISTS|COMMENT ON)\s",
        re.IGNORECASE,
    )
    for name, head, tail in found:
        assert not _queries.outside_transaction(head), name
        for statement in _queries.statements(tail):
            assert _IDEMPOTENT.match(statement), f"{name}: {statement}"
        # CREATE FUNCTION (after its DROP ... IF EXISTS) is made again too.
        lines = [ln for ln in head.splitlines() if ln and not ln.startswith((" ", "--", ")"))]
        starts = [
            ln
            for ln in lines
            if re.match(r"^[A-Z]+ ", ln)
            and not ln.startswith(
                ("CREATE FUNCTION", "DECLARE", "BEGIN", "END", "LANGUAGE", "WITH", "RETURNS")
            )
        ]
        for statement in starts:
            assert again.match(statement), f"{name}: {statement}"
    assert _then_outside("durably.backends.sqlite") == []


def test_sqlite_runs_every_migration_in_its_transaction() -> None:
    assert _outside("durably.backends.sqlite") == []


def test_statements_are_split_at_line_ends_without_comments() -> None:
    text = "-- durably: no transaction\n-- why\nDROP INDEX a;\nCREATE INDEX b\n  ON t (x);\n"
    assert _queries.outside_transaction(text)
    assert _queries.statements(text) == ["DROP INDEX a", "CREATE INDEX b\n  ON t (x)"]
    assert not _queries.outside_transaction("-- a comment\n-- durably: no transaction\n")
