"""A client call bounded by the caller's timeout, its reads included.

Over a frozen network a read waits for the engine's statement deadline (30 s), and
psycopg's cancel of a statement on a frozen connection takes 10 s more; a caller who asked
for a timeout has its answer when the timeout passes. What the limit cuts short ends in the
background.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class TimeUp(Exception):
    """The caller's limit passed before the work ended."""


async def within(limit: float | None, work: Coroutine[Any, Any, T]) -> T:
    """`await work`, for at most `limit` seconds (None: no limit); TimeUp after. A caller
    cancelled (by a limit of its own) has control back at once too."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieve)
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await asyncio.shield(task)
    except TimeoutError:
        if not deadline.expired():  # the work's own
            raise
        raise TimeUp from None
    finally:
        task.cancel()  # ended already, unless the limit or the caller's cancel came first


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Its outcome is read, or else not wanted (work cut short): never logged as lost."""
    if not task.cancelled():
        task.exception()
