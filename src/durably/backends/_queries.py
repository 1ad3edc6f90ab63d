"""Named SQL queries, loaded once from a dialect's packaged `queries.sql`.

A file holds blocks that start with `-- name: NAME`; parameters are written `:name` and
translated to the driver's style here, so the SQL files stay readable and alike. A block
may carry marker lines for its connector (`-- plan: each call`, `-- deadline: none`, see
`marked`).

Migrations are ordered files `migrations/NNNN_*.sql`, run whole in a transaction, unless
their first line is `-- durably: no transaction` (`outside_transaction`; PostgreSQL's
`CREATE INDEX CONCURRENTLY` cannot run in one): then their statements run one by one.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
_THEN_OUTSIDE = "-- durably: then outside a transaction"
_NO_TRANSACTION = "-- durably: no transaction"
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def load(package: str, style: str) -> dict[str, list[str]]:
    """The named queries of `package`/queries.sql, each a list of statements, with
    parameters in `style` ("named" keeps `:name`, "pyformat" makes it `%(name)s`)."""
    queries: dict[str, list[str]] = {}
    for name, body in _blocks(package):
        body = "\n".join(line for line in body.strip().splitlines() if not line.startswith("--"))
        if style == "pyformat":
            body = _PARAM.sub(r"%(\1)s", body)
        queries[name] = [part.strip() for part in body.split(";\n") if part.strip()]
        queries[name][-1] = queries[name][-1].rstrip(";")
    return queries


def marked(package: str, marker: str) -> set[str]:
    """The names of the queries of `package`/queries.sql that hold the line `-- marker`."""
    return {name for name, body in _blocks(package) if f"-- {marker}" in body.splitlines()}


def _blocks(package: str) -> list[tuple[str, str]]:
    """(name, text) of each block of `package`/queries.sql, comments included."""
    parts = _HEADER.split(resources.files(package).joinpath("queries.sql").read_text())
    return list(zip(parts[1::2], parts[2::2], strict=True))


def migrations(package: str) -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every `migrations/NNNN_*.sql`, in order."""
    folder = resources.files(package).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.name, entry.read_text()))
    return sorted(found)


def outside_transaction(migration: str) -> bool:
    """Whether the SQL of a migration starts with the line `-- durably: no transaction`."""
    return migration.split("\n", 1)[0].strip() == _NO_TRANSACTION


def then_outside(migration: str) -> tuple[str, str | None]:
    """A migration's part for its transaction and the part to run after that commits,
    outside any transaction (what follows a line `-- durably: then outside a
    transaction`: a CONCURRENTLY built index of a column the first part adds), or None."""
    head, marker, tail = migration.partition(f"\n{_THEN_OUTSIDE}\n")
    return (head, tail) if marker else (migration, None)


def statements(migration: str) -> list[str]:
    """The statements of a migration, split at each `;` that ends a line, without their
    comment lines (a function body, whose own `;` would be split, has no place here)."""
    text = "\n".join(line for line in migration.splitlines() if not line.startswith("--"))
    return [s.strip().removesuffix(";") for s in f"{text}\n".split(";\n") if s.strip()]
