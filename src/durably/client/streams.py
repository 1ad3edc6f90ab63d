"""Reading a run's stream (§4.21): `Durably.read_stream` and its blocking twin.

A reader reads the stream's state, then its values from its offset on, and yields them;
with nothing left to read it waits to be woken: by the write's NOTIFY (PostgreSQL) or a
commit (SQLite: this process's writes at once, another process's through the data-version
poll), by the run's end, or by a safety poll. Each read asks the database, so a reader that
connects late, or was disconnected, loses nothing and sees each value once, in order. The
state and the values are read in one statement (one snapshot, one round trip): a stream
closed (or a run ended) in it has every value in it, and the reader stops when a read of
a closed stream finds no more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.errors import InvalidInput
from ..store.streams import Streams

if TYPE_CHECKING:
    from .operating import Operating

T = TypeVar("T")
SAFETY_POLL_S = 1.0  # a lost listening connection makes a reader up to this late


async def read_stream(op: Operating, run_id: str, key: str, offset: int = 0) -> AsyncIterator[Any]:
    """The values of run `run_id`'s stream `key` from `offset` on (see the module)."""
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < 2**63:
        # Offsets are 64-bit integers in SQL: a larger one would reach the driver's overflow.
        raise InvalidInput(f"a stream offset is an integer from 0 to 2**63 - 1, not {offset!r}")
    await op.app.open()
    streams = Streams(op.store)
    await streams.state(run_id, key)  # RunNotFound before anything is awaited on
    watch = op.end_watch
    async with watch.watching_events(run_id) as changed, watch.watching(run_id) as ended:
        while True:
            changed.clear()
            state, batch = await streams.poll(run_id, key, offset)
            for at, value in batch:
                offset = at + 1
                yield value
            if batch:
                continue
            if state.ended:
                return
            await _either(changed.wait(), ended.wait(None))


async def _either(*waits: Coroutine[Any, Any, Any]) -> None:
    """Until one of `waits` returns, or the safety poll's time has passed."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=SAFETY_POLL_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)


def blocking_stream(
    run: Callable[[Coroutine[Any, Any, Any]], Any], values: AsyncIterator[T]
) -> Iterator[T]:
    """`values`, read one at a time through `run` (the sync facade's loop)."""

    async def step() -> tuple[bool, Any]:
        try:
            return True, await anext(values)
        except StopAsyncIteration:
            return False, None

    async def close() -> None:
        closing = getattr(values, "aclose", None)
        if closing is not None:
            await closing()

    try:
        while True:
            more, value = run(step())
            if not more:
                return
            yield value
    finally:
        run(close())
