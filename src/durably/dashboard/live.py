"""Live pages: server-sent events instead of reloads. The stream of a page
(`/live/?FILTERS` for the runs list, `/live/runs/ID` for a run) sends the page's live part
again each time it changed; `/live.js` puts it in the page.

`Changes` says when the database may have changed, from the app's own change
notification (the one that wakes `RunHandle.wait`, see `store.endwatch`): on SQLite,
every commit of any process (the connector's `PRAGMA data_version` watch); on PostgreSQL,
the engine's NOTIFYs (a run started or made due, a parent woken, a cancel, an event set,
an awaited run ended). PostgreSQL announces neither a claim nor a step's record nor the
end of a run nobody awaits, so there the streams also look every `PG_LOOK_S`. One
listening connection serves every stream, held while any is open.

On each wake-up a stream renders its part, and sends it only if its digest differs from
the one the page shows (the event's id, which a reconnecting page gives back); a burst of
notifications costs at most one render per `MIN_GAP_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response

from ..client.durably import Durably
from ..core.errors import DurablyError, RunNotFound
from ..web.sse import Event, EventStreams
from .pages import RUN_ID, Listing, Pages, digest

log = logging.getLogger("durably.dashboard")
PG_LOOK_S = 2.0
MIN_GAP_S = 0.2
SCRIPT = (files(__package__ or "durably.dashboard") / "static" / "live.js").read_text()

Render = Callable[[], Awaitable[str]]


class Changes:
    """Wake-ups for the open streams when the database of `app` may have changed."""

    def __init__(self, app: Durably) -> None:
        self.app = app
        self._woken: set[asyncio.Event] = set()
        self._lock: asyncio.Lock | None = None
        self._stop: Callable[[], Awaitable[None]] | None = None
        self._looker: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[asyncio.Event]:
        """An event set at each change from now on (clear it before reading)."""
        woken = asyncio.Event()
        self._woken.add(woken)
        try:
            await self._listen()
            yield woken
        finally:
            self._woken.discard(woken)
            if not self._woken:  # the last stream: no connection held for nobody
                await asyncio.shield(self._unlisten())

    async def _listen(self) -> None:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._stop is not None:
                return
            await self.app.open()
            connector = self.app.connector
            # LISTENING comes first (and after each reconnect): a wake-up like any other.
            self._stop = await connector.listen(self._wake)
            if connector.dialect == "postgresql":
                self._looker = asyncio.create_task(self._look(), name="durably-live-look")

    async def _unlisten(self) -> None:
        assert self._lock is not None
        async with self._lock:
            if self._woken or self._stop is None:
                return  # another stream came meanwhile
            stop, looker, self._stop, self._looker = self._stop, self._looker, None, None
            if looker is not None:
                looker.cancel()
                await asyncio.gather(looker, return_exceptions=True)
            await stop()

    def _wake(self, message: str = "") -> None:
        for woken in self._woken:
            woken.set()

    async def _look(self) -> None:
        while True:
            await asyncio.sleep(PG_LOOK_S)
            self._wake()


class Live:
    """The event streams of the pages of `app`, and the script that follows them."""

    def __init__(self, app: Durably, pages: Pages, streams: EventStreams) -> None:
        self.app = app
        self.pages = pages
        self.streams = streams
        self.changes = Changes(app)

    async def runs(self, request: Request) -> Response:
        """`/live/?FILTERS`: the runs list's part, as `/?FILTERS` shows it."""
        listing = Listing.of(request.query_params)  # a bad filter: 400, before any stream
        return self._stream(request, lambda: self.pages.part_of_runs(listing))

    async def run(self, request: Request) -> Response:
        """`/live/runs/ID`: the run's part, as `/runs/ID` shows it."""
        run_id = str(request.path_params["run_id"])
        if not RUN_ID.fullmatch(run_id):
            return await self.pages.not_found(request)
        await self.app.get_run(run_id)  # an unknown run: 404, and the page stops asking
        return self._stream(request, lambda: self.pages.part_of_run(run_id))

    async def script(self, request: Request) -> Response:
        return Response(SCRIPT, media_type="text/javascript; charset=utf-8",
                        headers={"Cache-Control": "no-cache"})  # fmt: skip

    def _stream(self, request: Request, render: Render) -> Response:
        seen = request.headers.get("last-event-id") or request.query_params.get("seen")
        return self.streams.response(self._updates(render, seen))

    async def _updates(self, render: Render, seen: str | None) -> AsyncGenerator[Event, None]:
        """The part `render` makes, each time it differs from `seen`: watching first,
        rendering after, so that no change falls between the two."""
        loop = asyncio.get_running_loop()
        async with self.changes.watching() as woken:
            while True:
                woken.clear()
                rendered_at = loop.time()
                try:
                    part = await render()
                except RunNotFound:
                    return  # purged: the page's next try is answered 404
                except DurablyError as exc:  # the database away: the next wake-up tries again
                    log.warning("a live page could not be rendered: %s", exc)
                else:
                    if digest(part) != seen:
                        seen = digest(part)
                        yield Event(part, "update", seen)
                await woken.wait()
                gap = MIN_GAP_S - (loop.time() - rendered_at)
                if gap > 0:
                    await asyncio.sleep(gap)
