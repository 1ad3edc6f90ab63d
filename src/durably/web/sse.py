"""Server-sent events (`text/event-stream`): the open streams of one server, bounded in
number and ended at once when the server stops.

uvicorn's graceful shutdown waits for every response in flight; a stream never ends by
itself, so without `EventStreams.close` (which `server.serve` calls as shutdown begins) a
SIGTERM would wait out the whole grace and then cancel the streams. Closed, each stream
ends after the event it is writing; a browser's EventSource then reconnects to whatever
serves the address next.

A stream also writes a comment every `KEEPALIVE_S` while it has nothing to say, so that a
proxy does not drop it as idle.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response, StreamingResponse

from .errors import refusal

KEEPALIVE_S = 15.0
# A browser keeps one stream per open page; more than this many at once is not people.
DEFAULT_LIMIT = 32


@dataclass(frozen=True)
class Event:
    """One event: `data` (any text; a line each `data:` field), of type `event`, with
    `id` (what a reconnecting EventSource sends back as `Last-Event-ID`)."""

    data: str
    event: str = "message"
    id: str | None = None

    def encode(self) -> bytes:
        lines = [f"event: {self.event}"]
        if self.id is not None:
            lines.append(f"id: {self.id}")
        # By the protocol's own line ends only: str.splitlines also breaks at U+2028 and
        # other separators, which the browser would join back as "\n".
        lines += [f"data: {line}" for line in re.split(r"\r\n|\r|\n", self.data)]
        return ("\n".join(lines) + "\n\n").encode()


class EventStreams:
    """The server's open event streams: at most `limit` at once (503 beyond), all ended
    by `close()`."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.open = 0
        self._closed = False
        self._closing: asyncio.Event | None = None

    def response(self, events: AsyncGenerator[Event, None]) -> Response:
        """The response streaming `events` until they end, the client goes, or `close()`."""
        if self._closed:
            return refusal(503, "the server is stopping")
        if self.open >= self.limit:
            why = f"{self.open} event streams are open, the most this server keeps: close a page"
            return refusal(503, why, {"Retry-After": "10"})
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        # Counted from here, not from the stream's first step: a burst of requests all
        # pass the check above before any of their streams has begun.
        self.open += 1
        return _Counted(self, self._until_closed(events), headers=headers,
                        media_type="text/event-stream")  # fmt: skip

    def close(self) -> None:
        """End every stream (after the event it is writing), and refuse new ones."""
        self._closed = True
        if self._closing is not None:
            self._closing.set()

    async def _until_closed(self, events: AsyncGenerator[Event, None]) -> AsyncIterator[bytes]:
        if self._closing is None:  # made in the server's loop, by its first stream
            self._closing = asyncio.Event()
        closing = asyncio.ensure_future(self._closing.wait())
        if self._closed:
            self._closing.set()
        following: asyncio.Future[Event] | None = None
        try:
            while True:
                if following is None:
                    following = asyncio.ensure_future(anext(events))
                either: set[asyncio.Future[Any]] = {following, closing}
                done, _ = await asyncio.wait(either, timeout=KEEPALIVE_S,
                                             return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if closing in done:
                    return
                if following not in done:
                    yield b": keep-alive\n\n"
                    continue
                try:
                    event = following.result()
                except StopAsyncIteration:
                    return
                following = None
                yield event.encode()
        finally:
            for task in (following, closing):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in (following, closing) if t), return_exceptions=True)
            await events.aclose()


class _Counted(StreamingResponse):
    """A stream that gives its place among the open ones back when it is over, however
    it ends (even if its body never began: the client went first)."""

    def __init__(self, streams: EventStreams, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._streams = streams

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._streams.open -= 1
