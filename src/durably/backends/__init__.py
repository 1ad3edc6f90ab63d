"""Storage backends: one factory picks the dialect from the URL."""

from __future__ import annotations

import re

from ..core.clock import Clock
from ..core.errors import ConfigurationError
from ._base import LISTENING, Connector, Fetched, Row, Sent, Tx

__all__ = ["LISTENING", "Connector", "Fetched", "Row", "Sent", "Tx", "connect", "validate_schema"]

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,40}")


def validate_schema(name: str) -> str:
    """The schema name, if it is a plain lower-case identifier; else ConfigurationError."""
    if not isinstance(name, str) or not _SCHEMA.fullmatch(name):
        raise ConfigurationError(
            f"invalid schema name {name!r}: use lower-case letters, digits and '_', "
            "starting with a letter or '_', at most 41 characters"
        )
    return name


def connect(url: str, schema: str, clock: Clock, pool_size: int = 10) -> Connector:
    """A connector for `postgresql://…` or `sqlite:///path` (nothing is opened yet);
    `sqlite:///path?mode=ro` opens an existing file for reading only."""
    schema = validate_schema(schema)
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        from .postgres.connector import PostgresConnector

        return PostgresConnector(
            url.replace("postgresql+psycopg://", "postgresql://"), schema, pool_size
        )
    if url.startswith("sqlite://"):
        from .sqlite.connector import SqliteConnector

        path, _, options = url.removeprefix("sqlite://").partition("?")
        path = path[1:] if path.startswith("/") else path
        if options not in ("", "mode=ro"):
            raise ConfigurationError(
                f"unsupported SQLite URL option {options!r}: the one option is ?mode=ro"
            )
        return SqliteConnector(path or ":memory:", schema, clock, read_only=bool(options))
    raise ConfigurationError(
        f"unsupported database URL {url!r}: use postgresql://… or sqlite:///path/to/file.db"
    )


_POSTGRES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def connect_replica(url: str, read_url: str, schema: str, pool_size: int = 10) -> Connector:
    """A connector to `read_url`, a streaming replica of the PostgreSQL database at `url`
    (ConfigurationError for any other pair: SQLite has no replicas)."""
    if not url.startswith(_POSTGRES):
        raise ConfigurationError(
            f"read_url is for PostgreSQL (a streaming replica of the primary); a "
            f"{url.split(':', 1)[0]}: database has none: drop read_url (or "
            "DURABLY_READ_DATABASE_URL, --read-database)"
        )
    if not read_url.startswith(_POSTGRES):
        raise ConfigurationError(
            f"read_url must be the postgresql://… URL of a streaming replica of the "
            f"primary, not a {read_url.split(':', 1)[0]}: URL"
        )
    from .postgres.replica import replica_connector

    return replica_connector(read_url, validate_schema(schema), pool_size)
