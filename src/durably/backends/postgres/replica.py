"""The connector to a streaming replica (`Durably(url, read_url=...)`): the primary's
queries, on connections named `durably-read` (`pg_stat_activity` on the standby shows
them), that give up sooner than the primary's: a replica that cannot serve is replaced by
the primary (`client/reads.py`), not waited for. Never migrated: a standby is read-only,
and it replays the primary's migrations itself."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .connector import PostgresConnector

REPLICA_DEFAULTS = {"application_name": "durably-read", "connect_timeout": "2"}
REPLICA_CHECKOUT_S = 2.0  # a replica's pooled connection is awaited this long


def replica_connector(read_url: str, schema: str, pool_size: int) -> PostgresConnector:
    """A connector to the replica at `read_url` (nothing is opened yet)."""
    url = read_url.replace("postgresql+psycopg://", "postgresql://")
    given = conninfo_to_dict(url)
    url = make_conninfo(url, **{k: v for k, v in REPLICA_DEFAULTS.items() if k not in given})
    return PostgresConnector(url, schema, pool_size, checkout_s=REPLICA_CHECKOUT_S)
