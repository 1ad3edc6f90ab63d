"""Server-sent event streams (durably.web.sse) in process: the wire format, the bound on
open streams, and `close()` ending a stream that would never end by itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

from starlette.responses import StreamingResponse

from durably.web.sse import Event, EventStreams


def test_an_event_is_a_field_a_line() -> None:
    encoded = Event("<p>\n</p>", "update", "d1").encode()
    assert encoded == b"event: update\nid: d1\ndata: <p>\ndata: </p>\n\n"
    assert Event("").encode() == b"event: message\ndata: \n\n"
    # Only CR, LF and CRLF end a line: U+2028 (in a signal's name, say) stays what it is.
    assert Event("a\u2028b\r\nc").encode() == "event: message\ndata: a\u2028b\ndata: c\n\n".encode()


async def _forever(ended: list[str]) -> AsyncGenerator[Event, None]:
    try:
        yield Event("first", "update", "1")
        await asyncio.Event().wait()  # nothing more, ever
        yield Event("never")
    finally:
        ended.append("cleaned up")


async def test_close_ends_an_open_stream_and_refuses_new_ones() -> None:
    streams, ended = EventStreams(limit=1), list[str]()
    response = streams.response(_forever(ended))  # counted from the response on
    assert isinstance(response, StreamingResponse)
    body = cast(AsyncIterator[bytes], response.body_iterator)
    assert streams.open == 1
    assert await anext(body) == Event("first", "update", "1").encode()
    full = streams.response(_forever([]))
    assert full.status_code == 503 and full.headers["retry-after"] == "10"

    following = asyncio.ensure_future(anext(body))
    await asyncio.sleep(0)  # it waits for the generator's next event
    streams.close()
    async with asyncio.timeout(5):
        try:
            await following
        except StopAsyncIteration:
            pass
        else:
            raise AssertionError("the stream went on after close()")
    assert ended == ["cleaned up"]  # its place is given back as its response ends (see
    # test_web_sse_limit, on a real server)
    assert streams.response(_forever([])).status_code == 503
