"""EventStreams' bound holds under a burst: a stream counts as open from its response on,
not from its first step (a burst on a real uvicorn server all passed the check before)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncGenerator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from durably.web.sse import Event, EventStreams
from tests.helpers import eventually


async def test_a_burst_opens_no_more_streams_than_the_limit() -> None:
    streams = EventStreams(limit=2)

    async def forever() -> AsyncGenerator[Event, None]:
        yield Event("first", "update", "1")
        await asyncio.Event().wait()
        yield Event("never")

    async def live(request: Request) -> Response:
        return streams.response(forever())

    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(Starlette(routes=[Route("/live", live)]), log_config=None,
                            lifespan="off")  # fmt: skip
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    await eventually(lambda: _started(server), what="the server to listen")
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
    for _, w in conns:  # all written before any is answered
        w.write(b"GET /live HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.gather(*(w.drain() for _, w in conns))
    statuses = [(await r.readline()).split()[1] for r, _ in conns]
    served = statuses.count(b"200")
    server.should_exit = True
    streams.close()
    for _, w in conns:
        w.close()
    await serving
    assert served == 2, f"{served} streams opened under a limit of 2 (open={streams.open})"
    assert streams.open == 0  # each gave its place back, refused or ended


async def _started(server: uvicorn.Server) -> bool:
    return bool(server.started)
