"""The HTTP API (SPEC §4.25) on Starlette, served by uvicorn: `durably serve`.

Starlette and uvicorn are the optional extra `durably[web]`; nothing here imports them
at import time but the modules that serve (`app`, `api`, `guard`, `errors`, `openapi`,
`server`), so `missing_extra` can say what to install before any of them is imported,
and the dashboard can share the token (`credential`) without the extra.

Layout: `app.create_app` builds the ASGI app (the API mounted at `/api/v1`, and room for
the dashboard's pages beside it); `api` holds the routes, `openapi` their OpenAPI
document, `guard` the `Host` allow-list and the bearer token, `errors` how the engine's
errors become HTTP answers, `server` runs an app with uvicorn.
"""

from __future__ import annotations

from importlib.util import find_spec

INSTALL = "pip install 'durably[web]'"
_NEEDED = ("starlette", "uvicorn")


def missing_extra() -> list[str]:
    """The packages of the `durably[web]` extra that are not installed (none: it is)."""
    return [name for name in _NEEDED if find_spec(name) is None]
