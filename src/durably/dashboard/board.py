"""The dashboard: its pages, forms, live streams and `/metrics` as routes of the web app,
served with the HTTP API (the same token) by `durably dashboard`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from ..client.durably import Durably
from ..web.app import create_app
from ..web.guard import HostAllowList
from ..web.sse import EventStreams
from .actions import Actions
from .auth import Auth
from .live import Live
from .metrics import Metrics
from .pages import Pages


class Dashboard:
    """The dashboard of `app`; actions need `token` (None: a new one, `auth.token`).

    Example:
        ```python
        board = Dashboard(app, token="s3cret")
        asgi = board.asgi(HostAllowList.of("127.0.0.1", 8080))  # for uvicorn: web.server
        ```
    """

    def __init__(self, app: Durably, token: str | None = None) -> None:
        self.app = app
        self.auth = Auth(token)
        self.streams = EventStreams()  # closed by the server as it stops (web.server)
        self.pages = Pages(app, self.auth)
        self.actions = Actions(app, self.auth, self.pages)
        self.live = Live(app, self.pages, self.streams)
        self.metrics = Metrics(app)

    def routes(self) -> list[BaseRoute]:
        """The dashboard's routes (beside the API's `/api/v1`, which come first)."""
        pages, actions, live = self.pages, self.actions, self.live
        guarded, checked = pages.guarded, actions.checked
        return [
            Route("/", guarded(pages.runs), methods=["GET"]),
            Route("/runs/{run_id}", guarded(pages.run), methods=["GET"]),
            Route("/login", guarded(pages.login), methods=["GET"]),
            Route("/login", guarded(actions.login), methods=["POST"]),
            Route("/runs/{run_id}/cancel", checked(actions.cancel), methods=["POST"]),
            Route("/runs/{run_id}/resume", checked(actions.resume), methods=["POST"]),
            Route("/runs/{run_id}/fork", checked(actions.fork), methods=["POST"]),
            Route("/purge", checked(actions.purge), methods=["POST"]),
            Route("/start", checked(actions.start), methods=["POST"]),
            Route("/signal", checked(actions.signal), methods=["POST"]),
            Route("/live/", guarded(live.runs), methods=["GET"]),
            Route("/live/runs/{run_id}", guarded(live.run), methods=["GET"]),
            Route("/live.js", live.script, methods=["GET"]),
            Route("/metrics", self.metrics.scrape, methods=["GET"]),
            Route("/{path:path}", pages.not_found, methods=["GET", "POST"]),
        ]

    def asgi(self, allowed: HostAllowList) -> Starlette:
        """The web app: these pages and the API, answering under a `Host` in `allowed`."""
        return create_app(self.app, self.auth.token, allowed, self.routes())
