"""The store's one seam for payloads at rest (SPEC §4.24): every row the engine reads goes
through `SealedConnector`, which opens each sealed value in it (a column, or one inside an
aggregate such as a run's history) back to the JSON text that was sealed, with the app's
codec. Payloads are sealed where they are encoded (`codec.encode(..., codec=)`), since the
payload limit applies to what is stored.

A value it cannot open (no codec, or none of its keys) reads as `"<encrypted>"` and the row
is marked (`SEALED`): the CLI and the dashboard show it, and a worker holds such a run
rather than run it on values it cannot see (see `execution`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from ..backends import Connector, Row, Sent, Tx
from ..core.sealing import Codec, Opened, as_stored, open_text

T = TypeVar("T")
# The key a row read with a value that could not be opened has (its value: the columns).
SEALED = "durably_sealed"


def _as_stored(params: dict[str, Any]) -> dict[str, Any]:
    """`params` with each text read through the seam as it was stored (see `Opened`)."""
    for key, value in params.items():
        if type(value) is Opened:
            params[key] = as_stored(value)
    return params


def open_rows(rows: list[Row], codec: Codec | None) -> list[Row]:
    """`rows`, each sealed value in them opened (in place)."""
    for row in rows:
        shut: list[str] | None = None
        for key, value in row.items():
            if type(value) is str and '"durably:enc:' in value:
                text, opened = open_text(value, codec)
                row[key] = Opened(text, value)
                if not opened:
                    shut = [*(shut or ()), key]
        if shut:
            row[SEALED] = shut
    return rows


class SealedConnector:
    """A `Connector` whose rows come with their sealed values opened (see the module)."""

    def __init__(self, inner: Connector, codec: Codec | None) -> None:
        self.inner = inner
        self.codec = codec
        self.dialect = inner.dialect
        self.schema = inner.schema

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def migrate(self) -> list[str]:
        return await self.inner.migrate()

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        return open_rows(await self.inner.fetch(query, **_as_stored(params)), self.codec)

    @asynccontextmanager
    async def transaction(
        self, external: Any = None, *, pipelined: bool = True
    ) -> AsyncIterator[Tx]:
        async with self.inner.transaction(external, pipelined=pipelined) as tx:
            yield _SealedTx(tx, self.codec)

    async def retrying(self, work: Callable[[], Awaitable[T]], what: str) -> T:
        return await self.inner.retrying(work, what)

    async def listen(self, on_message: Callable[[str], None]) -> Callable[[], Awaitable[None]]:
        return await self.inner.listen(on_message)

    def notify_local(self, message: str) -> None:
        self.inner.notify_local(message)


class _SealedTx:
    def __init__(self, inner: Tx, codec: Codec | None) -> None:
        self._inner = inner
        self._codec = codec

    @property
    def connection(self) -> Any:
        return self._inner.connection

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self._inner.call(fn, *args)

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        return open_rows(await self._inner.fetch(query, **_as_stored(params)), self._codec)

    async def send(self, query: str, **params: Any) -> Sent:
        return _SealedSent(await self._inner.send(query, **_as_stored(params)), self._codec)


class _SealedSent:
    def __init__(self, inner: Sent, codec: Codec | None) -> None:
        self._inner = inner
        self._codec = codec

    async def rows(self) -> list[Row]:
        return open_rows(await self._inner.rows(), self._codec)
