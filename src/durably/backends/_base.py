"""The narrow interface both storage dialects implement.

The engine speaks in named queries (see `queries.sql` of each dialect); a connector runs
them, inside a transaction of its own or of the caller's, and hands back rows as dicts
with JSON columns as text and times as aware datetimes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

Row = dict[str, Any]
T = TypeVar("T")

# What `Connector.listen` delivers first, and again after each reconnect: it listens (now),
# and messages sent before may have been missed.
LISTENING = "listening"


class Tx(Protocol):
    """One open transaction."""

    @property
    def connection(self) -> Any:
        """The driver's connection, for `step.transaction` bodies."""

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A `step.transaction` body, `fn(connection, *args)`, awaited if it is async; on
        SQLite a plain function runs on the connection's own thread."""

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        """Run a named query; the rows it returns."""

    async def send(self, query: str, **params: Any) -> Sent:
        """Run a named query without waiting for its answer. In a pipelined transaction it
        goes to the server with the next statement that needs an answer (or the commit),
        and its error is raised there; its rows can be read once that answer is in."""


class Sent(Protocol):
    """A statement sent with `Tx.send`."""

    async def rows(self) -> list[Row]:
        """Its rows. Read after the transaction has ended they cost nothing more; read
        inside it, they cost a round trip if nothing since has waited for an answer."""


class Connector(Protocol):
    """A database the engine can run named queries on."""

    dialect: str
    schema: str

    async def open(self) -> None:
        """Connect (idempotent)."""

    async def close(self) -> None:
        """Release every connection."""

    async def migrate(self) -> list[str]:
        """Apply the migrations not yet applied; the names applied now."""

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        """Run a named query in a transaction of its own."""

    def transaction(
        self, external: Any = None, *, pipelined: bool = True
    ) -> AbstractAsyncContextManager[Tx]:
        """A transaction; inside the caller's own when `external` is their connection.

        The engine's own transactions are pipelined where the driver can: BEGIN goes with
        the first statement, and statements sent with `Tx.send` go with the next one, so
        a transaction costs a round trip per answer it waits for, plus the commit. A
        transaction that hands its connection to user code is not (`pipelined=False`).
        """

    async def retrying(self, work: Callable[[], Awaitable[T]], what: str) -> T:
        """`work` (a transaction of its own), run again when the database aborted it whole
        (`DatabaseConflict`), a few times."""

    async def listen(self, on_message: Callable[[str], None]) -> Callable[[], Awaitable[None]]:
        """Deliver wake-up messages to `on_message` until the returned stop is awaited;
        `LISTENING` first, once listening, and again after each reconnect."""

    def notify_local(self, message: str) -> None:
        """Deliver a wake-up message to this process's listeners (after a commit)."""


class Fetched:
    """A `Sent` statement that ran at once: its rows are here."""

    def __init__(self, rows: list[Row]) -> None:
        self._rows = rows

    async def rows(self) -> list[Row]:
        return self._rows
