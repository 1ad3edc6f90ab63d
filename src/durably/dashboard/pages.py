"""The dashboard's pages (§4.11, §4.18): the runs list with its filters and queues, a run
with its steps' timeline, the login form, and the page an error ends on; rendered by the
Jinja2 templates in `templates/`, every value escaped.

A page's live part (`runs_part.html`, `run_part.html`) is rendered by `part_of_runs` and
`part_of_run`: into the page here, and again by `live` each time the database may have
changed. The page names its stream with a digest of the part it holds (`seen`), so that
the stream sends only a part that differs.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..client.durably import Durably
from ..core.durations import parse_duration
from ..core.errors import DurablyError
from ..store.models import STATUSES
from ..web.errors import status_of
from . import views
from .auth import Auth

log = logging.getLogger("durably.dashboard")
PAGE = 50  # runs a list page shows
STREAM_VALUES = 10  # the latest values a run page shows of each of its streams
# Pages are framed by nobody and run no script but the dashboard's own (`/live.js`);
# the timeline's bars are placed by inline styles.
HEADERS = {"X-Frame-Options": "DENY",
           "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'"}  # fmt: skip
RUN_ID = re.compile(r"[0-9A-Za-z_-]+")
_FILTERS = ("status", "workflow", "since", "queue", "key", "attr")

Handler = Callable[[Request], Awaitable[Response]]


class DashboardError(Exception):
    """A request that cannot be served as asked; its message is shown on the page."""


@dataclass(frozen=True)
class Listing:
    """Which runs the list shows: its filters (as given), how many newer runs it skips."""

    filters: dict[str, str]
    offset: int
    since: timedelta | None

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Listing:
        """The listing a page's query asks for (DashboardError, InvalidDuration: a 400)."""
        status = query.get("status") or None
        if status is not None and status not in STATUSES:
            raise DashboardError(f"unknown status {status!r}")
        since = parse_duration(query["since"]) if query.get("since") else None
        try:
            offset = max(0, int(query.get("offset", "0")))
        except ValueError:
            raise DashboardError("offset must be a number") from None
        return cls({k: query[k] for k in _FILTERS if query.get(k)}, offset, since)

    def query(self, **more: str) -> str:
        """The query that asks for this listing again (and `more`)."""
        offset = {"offset": str(self.offset)} if self.offset else {}
        return urlencode({**self.filters, **offset, **more})


def digest(part: str) -> str:
    """What names a rendered part, for the page and its stream to compare."""
    return hashlib.sha256(part.encode()).hexdigest()[:24]


class Pages:
    """The pages of `app`'s dashboard, and how every page is answered (`html`)."""

    def __init__(self, app: Durably, auth: Auth) -> None:
        self.app = app
        self.auth = auth
        self.templates = Environment(loader=PackageLoader("durably.dashboard"),
                                     autoescape=True, undefined=StrictUndefined)  # fmt: skip
        self.templates.filters.update(views.FILTERS)
        self.templates.globals["traceback_of"] = views.traceback_of

    # ---------------------------------------------------------------- answers

    def render(self, template: str, **values: Any) -> str:
        return self.templates.get_template(template).render(**values)

    def html(self, request: Request, template: str, title: str, status: int = 200, *,
             message: str = "", error: str = "", **values: Any) -> Response:  # fmt: skip
        """A whole page, its header saying who is logged in; `message` or `error` above
        its body."""
        user = self.auth.user(request.headers.get("cookie"))
        body = self.render(template, title=title, user=user, message=message, error=error,
                           **values)  # fmt: skip
        return HTMLResponse(body, status, HEADERS)

    def error(self, request: Request, status: int, error: str, title: str = "error") -> Response:
        return self.html(request, "base.html", title, status, error=error)

    def guarded(self, handler: Handler) -> Handler:
        """`handler`, its failures answered by a page that says what went wrong."""

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except DashboardError as exc:
                return self.error(request, 400, str(exc))
            except DurablyError as exc:  # the API's statuses: 400 bad input, 404 unknown…
                status = status_of(exc)
                if status == 500:
                    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
                return self.error(request, status, str(exc))
            except Exception:
                log.exception("dashboard request %s %s failed", request.method, request.url.path)
                return self.error(request, 500, "internal error; see the server log")

        return guarded

    # ---------------------------------------------------------------- pages

    async def runs(self, request: Request) -> Response:
        """`/`: the runs, newest first, filtered; the queues; the forms to start, signal
        and purge."""
        query = request.query_params
        listing = Listing.of(query)
        part = await self.part_of_runs(listing)
        return self.html(
            request, "runs.html", "runs", message=query.get("message", ""),
            error=query.get("error", ""), part=Markup(part), filters=listing.filters,
            live=f"/live/?{listing.query(seen=digest(part))}", statuses=STATUSES,
            workflows=sorted({name for name, _ in self.app.workflows}), csrf=self.auth.csrf(),
        )  # fmt: skip

    async def part_of_runs(self, listing: Listing) -> str:
        since = datetime.now(UTC) - listing.since if listing.since is not None else None
        filters = listing.filters
        runs = await self.app.list_runs(
            status=filters.get("status"), workflow=filters.get("workflow"), limit=PAGE,
            offset=listing.offset, created_after=since, queue=filters.get("queue"),
            idempotency_key=filters.get("key"), attributes=views.attributes_filter(filters),
        )  # fmt: skip
        around = views.pages_around(filters, listing.offset, len(runs), PAGE)
        queues = await self.app.queue_counts()
        return self.render("runs_part.html", runs=runs, queues=queues, around=around).strip()

    async def run(self, request: Request) -> Response:
        """`/runs/ID`: the run, its steps, its events, and what can be done with it."""
        run_id = str(request.path_params["run_id"])
        if not RUN_ID.fullmatch(run_id):
            return await self.not_found(request)
        part = await self.part_of_run(run_id)
        return self.html(
            request, "run.html", f"run {run_id}", message=request.query_params.get("message", ""),
            part=Markup(part), live=f"/live/runs/{run_id}?seen={digest(part)}",
        )  # fmt: skip

    async def part_of_run(self, run_id: str) -> str:
        app = self.app
        run = await app.get_run(run_id)
        steps = await app.list_steps(run_id)
        events = await app.list_events(run_id)
        streams = await app.list_streams(run_id, last=STREAM_VALUES)
        completed = len(await app.operations.log_entries(run))
        return self.render(
            "run_part.html", run=run, csrf=self.auth.csrf(), children=views.children(steps),
            due_at=views.due_at(run), wakes_at=views.wakes_at(run),
            signals=views.waited_signals(run), resumable=views.resumable(run),
            completed=completed, events=events, streams=streams,
            bars=views.timeline(run, steps),
        ).strip()  # fmt: skip

    async def login(self, request: Request) -> Response:
        """`/login`: the form that takes the token."""
        return self.html(request, "login.html", "log in")

    async def not_found(self, request: Request) -> Response:
        what = "page" if request.method in ("GET", "HEAD") else "action"
        return self.error(request, 404, f"no {what} {request.url.path}", "not found")
