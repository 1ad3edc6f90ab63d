"""`durably dashboard`: runs, steps and actions in a browser; `/metrics` for Prometheus.

Pages rendered by Jinja2 templates, kept up to date by server-sent events, on the same
Starlette app as the HTTP API (`durably.web`, extra `durably[web]`), which it serves too.
Every request needs a `Host` the server answers to (`web.guard`); reading needs nothing
more (bound to 127.0.0.1 unless told otherwise); every action that changes state needs
the token, and is protected against cross-site request forgery (`auth`).

Layout: `board` (the routes, `Dashboard`), `pages` (what is read, rendered by
`templates/`), `views` (what a page shows of a run, no I/O), `actions` (the forms),
`auth` (the login cookie, the CSRF field), `live` (the pages' event streams, and the
change notifications that drive them), `metrics` (`/metrics`).
"""

from .board import Dashboard

__all__ = ["Dashboard"]
