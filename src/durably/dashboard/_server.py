"""The dashboard's HTTP server: routing, forms, errors shown on the page."""

from __future__ import annotations

import logging
import re
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..client.durably import Durably
from ..core.codec import parse
from ..core.durations import parse_duration
from ..core.errors import DurablyError
from ..store.models import STATUSES
from . import _metrics, _operating, _pages
from ._auth import Auth

log = logging.getLogger("durably.dashboard")
PAGE = 50


class DashboardError(Exception):
    """A request that cannot be served as asked; its message is shown on the page."""


class Dashboard:
    """Serves the dashboard for `app` (queries go through `app.sync`).

    Example:
        `Dashboard(app, token="s3cret").serve("127.0.0.1", 8080)`
    """

    def __init__(self, app: Durably, token: str | None = None) -> None:
        self.app = app
        self.client = app.sync
        self.auth = Auth(token)

    def server(self, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
        dashboard = self

        class Handler(_Handler):
            owner = dashboard

        httpd = ThreadingHTTPServer((host, port), Handler)
        httpd.daemon_threads = True
        return httpd

    def serve(self, host: str = "127.0.0.1", port: int = 8080) -> None:
        """Serve until interrupted."""
        with self.server(host, port) as httpd:
            httpd.serve_forever()

    def serve_in_background(self, host: str, port: int) -> ThreadingHTTPServer:
        httpd = self.server(host, port)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd


class _Handler(BaseHTTPRequestHandler):
    owner: Dashboard
    server_version = "durably"

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    # ---------------------------------------------------------------- plumbing

    def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:  # fmt: skip
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _user(self) -> str | None:
        return self.owner.auth.user(self.headers.get("Cookie"))

    def _page(self, status: int, title: str, body: str, **options: Any) -> None:
        """A whole page (see `_pages.page`), its header saying who is logged in."""
        self._send(status, _pages.page(title, body, user=self._user(), **options))

    def _redirect(self, location: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(303)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()

    def _form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1024 * 1024:
            raise DashboardError("the form is too large")
        raw = self.rfile.read(length).decode(errors="replace")
        return {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}

    def _guarded(self, action: Any) -> None:
        try:
            action()
        except (DashboardError, DurablyError) as exc:
            self._page(400, "error", "", error=str(exc))
        except Exception:
            log.exception("dashboard request failed")
            self._page(500, "error", "", error="internal error; see the server log")

    # ---------------------------------------------------------------- routes

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _get(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/":
            self._list(query)
        elif m := re.fullmatch(r"/runs/([0-9A-Za-z_-]+)", url.path):
            self._detail(m.group(1), query)
        elif url.path == "/login":
            self._send(200, _pages.login(user=self._user()))
        elif url.path == "/refresh.js":
            self._send(200, _operating.REFRESH_JS, "text/javascript; charset=utf-8")
        elif url.path == "/metrics":
            body = _metrics.render(self.owner.client.run(_metrics.collect(self.owner.app)))
            self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._page(404, "not found", "", error=f"no page {url.path}")

    def _list(self, query: dict[str, str]) -> None:
        status = query.get("status") or None
        if status is not None and status not in STATUSES:
            raise DashboardError(f"unknown status {status!r}")
        since = None
        if query.get("since"):
            since = datetime.now(UTC) - parse_duration(query["since"])
        try:
            offset = max(0, int(query.get("offset", "0")))
        except ValueError:
            raise DashboardError("offset must be a number") from None
        runs = self.owner.client.list_runs(
            status=status,
            workflow=query.get("workflow") or None,
            limit=PAGE,
            offset=offset,
            created_after=since,
            queue=query.get("queue") or None,
            idempotency_key=query.get("key") or None,
        )
        filters = {k: query[k] for k in ("status", "workflow", "since", "queue", "key")
                   if query.get(k)}  # fmt: skip
        workflows = sorted({name for name, _ in self.owner.app.workflows})
        queues = self.owner.client.run(self.owner.app.queue_counts())
        body = _pages.queue_table(queues) + _pages.run_list(
            runs, filters, offset, PAGE, workflows, self.owner.auth.csrf()
        )
        self._page(
            200,
            "runs",
            body,
            message=query.get("message", ""),
            error=query.get("error", ""),
            refresh=10,
        )

    def _detail(self, run_id: str, query: dict[str, str]) -> None:
        client = self.owner.client
        run = client.get_run(run_id)
        steps = client.list_steps(run_id)
        events = client.list_events(run_id)
        completed = len(client.run(client.app.operations.log_entries(run)))
        body = _pages.run_detail(run, steps, self.owner.auth.csrf(), events, completed)
        self._page(
            200,
            f"run {run_id}",
            body,
            message=query.get("message", ""),
            refresh=0 if run.done else 5,
        )

    def _post(self) -> None:
        url = urlsplit(self.path)
        form = self._form()
        if url.path == "/login":
            if not self.owner.auth.matches(form.get("token")):
                self._send(403, _pages.login(error="wrong token", user=self._user()))
                return
            self._redirect("/?message=logged+in", {"Set-Cookie": self.owner.auth.cookie_header()})
            return
        headers = self.headers
        why = self.owner.auth.allows(
            headers.get("Cookie"), form, headers.get("Origin"), headers.get("Host")
        )
        if why is not None:
            self._page(403, "refused", "", error=why)
            return
        client = self.owner.client
        if m := re.fullmatch(r"/runs/([0-9A-Za-z_-]+)/cancel", url.path):
            run = client.cancel(m.group(1))
            self._redirect(f"/runs/{run.run_id}?message=canceled")
        elif m := re.fullmatch(r"/runs/([0-9A-Za-z_-]+)/(resume|fork)", url.path):
            self._operate(m.group(1), m.group(2), form)
        elif url.path == "/purge":
            done = client.purge(form.get("older_than") or "30d", form.get("status") or None)
            self._redirect(f"/?message=purged+{done['runs']}+runs+and+{done['signals']}+signals")
        elif url.path == "/start":
            data = _json_field(form, "input")
            handle = client.start(form.get("workflow", ""), data,
                                  idempotency_key=form.get("idempotency_key") or None)  # fmt: skip
            self._redirect(f"/runs/{handle.run_id}?message=started")
        elif url.path == "/signal":
            # the name is checked before anything is stored (InvalidInput: 400)
            result = client.send_signal(form.get("name", ""), _json_field(form, "data"),
                                        run_id=form.get("run_id") or None)  # fmt: skip
            if form.get("run_id") and result["delivered_to"]:
                self._redirect(f"/runs/{result['delivered_to'][0]}?message=signal+delivered")
                return
            self._redirect(
                f"/?message=signal+{'delivered' if result['delivered_to'] else 'buffered'}"
            )
        else:
            self._page(404, "not found", "", error=f"no action {url.path}")

    def _operate(self, run_id: str, action: str, form: dict[str, str]) -> None:
        client = self.owner.client
        if action == "resume":
            client.resume(run_id)
            self._redirect(f"/runs/{run_id}?message=resumed")
            return
        try:
            position = int(form.get("from", ""))
        except ValueError:
            raise DashboardError("fork from: a number of steps") from None
        handle = client.fork(run_id, from_position=position, version=form.get("version") or None)
        self._redirect(f"/runs/{handle.run_id}?message=forked+from+{run_id}")


def _json_field(form: dict[str, str], name: str) -> Any:
    # InvalidInput (a 400) for what is not JSON or what JSON cannot hold: NaN, Infinity, NUL.
    return parse(form.get(name, "").strip() or "null", name)
