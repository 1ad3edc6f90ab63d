"""The ASGI app: the API mounted at `/api/v1` behind the bearer token, everything behind
the `Host` allow-list, and the app's database closed when the server stops.

`durably serve` serves the API alone; `durably dashboard` passes its pages as `routes`
(beside the API, behind the `Host` check and the dashboard's own login cookie and CSRF
rules, not behind the API's bearer token) and serves both from one app.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route

from ..client.durably import Durably
from .api import Api
from .errors import HANDLERS
from .guard import BearerGuard, HostAllowList, HostGuard
from .openapi import openapi

PREFIX = "/api/v1"


def create_app(durably: Durably, token: str, allowed: HostAllowList,
               routes: Sequence[BaseRoute] = ()) -> Starlette:  # fmt: skip
    """The app serving `durably`'s API to callers presenting `token`, under a `Host` in
    `allowed`; `routes` are served beside it (the dashboard's pages).

    Example:
        ```python
        app = create_app(Durably(url), "s3cret", HostAllowList.of("127.0.0.1", 8080))
        ```
    """

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:  # the app connects at its first call; its pool closes with the server
            await durably.close()

    api = [*Api(durably).routes(), Route("/openapi.json", openapi, methods=["GET"])]
    return Starlette(
        routes=[Mount(PREFIX, routes=api, middleware=[Middleware(BearerGuard, token=token)]),
                *routes],
        middleware=[Middleware(HostGuard, allowed=allowed)],
        exception_handlers=HANDLERS,
        lifespan=lifespan,
    )  # fmt: skip
