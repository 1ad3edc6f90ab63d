"""The HTTP API (SPEC §4.25) on Starlette, served by uvicorn: `durably serve`.

Starlette and uvicorn are the optional extra `durably[web]` (with Jinja2 and
prometheus_client, for the dashboard's pages and `/metrics`); nothing here imports them at
import time but the modules that serve (`app`, `api`, `guard`, `errors`, `openapi`,
`sse`, `server`), so `missing_extra` can say what to install before any of them is
imported.

Layout: `app.create_app` builds the ASGI app (the API mounted at `/api/v1`, and the
dashboard's pages beside it when `durably dashboard` serves them); `api` holds the routes,
`openapi` their OpenAPI document, `guard` the `Host` allow-list and the bearer token,
`credential` the token itself, `errors` how the engine's errors become HTTP answers,
`sse` server-sent event streams, `server` runs an app with uvicorn.
"""

from __future__ import annotations

from importlib.util import find_spec

INSTALL = "pip install 'durably[web]'"
_NEEDED = ("starlette", "uvicorn")
_PAGES = ("jinja2", "prometheus_client")  # what the dashboard needs beyond the API


def missing_extra(pages: bool = False) -> list[str]:
    """The packages of the `durably[web]` extra that are not installed (none: it is);
    with `pages`, those the dashboard needs too."""
    needed = _NEEDED + _PAGES if pages else _NEEDED
    return [name for name in needed if find_spec(name) is None]
