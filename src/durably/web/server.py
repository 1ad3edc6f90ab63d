"""Serving an ASGI app with uvicorn, on a socket bound before anything is printed: once
the command has said where it listens, connections are taken (the kernel queues them
while uvicorn starts), and a port in use is one clear error, not a log line."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable, Sequence

import uvicorn
from starlette.types import ASGIApp

# How long SIGTERM waits for calls in flight (a long wait for an event) before it ends
# them: as long as a worker's default grace.
GRACE_S = 10


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (OSError if it cannot be had)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), port), family=family, backlog=2048)


class Server(uvicorn.Server):
    """uvicorn's server, calling `stopping` as its shutdown begins: what does not end by
    itself (an event stream, `sse.EventStreams.close`) ends then, before uvicorn waits
    for the responses in flight."""

    def __init__(self, config: uvicorn.Config, stopping: Sequence[Callable[[], None]]) -> None:
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for stop in self.stopping:
            stop()
        await super().shutdown(sockets)


def config(app: ASGIApp) -> uvicorn.Config:
    """How the app is served: its lifespan run, calls in flight given `GRACE_S` at a stop,
    uvicorn's logging left to the command's."""
    return uvicorn.Config(app, lifespan="on", timeout_graceful_shutdown=GRACE_S,
                          server_header=False, log_config=None)  # fmt: skip


def serve(app: ASGIApp, sock: socket.socket,
          stopping: Sequence[Callable[[], None]] = ()) -> None:  # fmt: skip
    """Serve `app` on `sock` until SIGTERM or SIGINT; then call `stopping`, stop taking
    connections, finish the calls in flight (for up to `GRACE_S`), run the app's
    shutdown, return."""
    server = Server(config(app), stopping)
    # After its graceful shutdown, uvicorn raises the signal again for the handler it
    # found: SIGTERM's default would end the process by the signal. Like `durably
    # worker`, a drained server exits 0. (Before uvicorn takes the signal over, this
    # handler asks it to stop as soon as it has started.)
    previous = signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # SIGINT, raised again the same way
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
