"""HTML of the dashboard's pages: small templates, every value escaped."""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import urlencode

from ..store.models import STATUSES, Run, StepAttempt
from . import _operating as ops

_CSS = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}td,th{padding:4px 8px;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}a{color:#0645ad}.s-completed{color:#18794e}
.s-failed{color:#c62828}.s-canceled{color:#8e24aa}.s-running{color:#0277bd}
.s-waiting{color:#3949ab}.s-pending{color:#b26a00}.s-abandoned{color:#777}.s-held{color:#d84315}
.bar{height:10px;background:#90caf9;position:relative}.lane{background:#f3f3f3;width:300px}
.error{background:#fdecea;padding:8px;border:1px solid #c62828}.notice{background:#e8f5e9;
padding:8px}form.inline{display:inline}pre{background:#f7f7f7;padding:6px;margin:0;
max-width:600px;overflow:auto}fieldset{margin:1em 0}
"""


def page(title: str, body: str, message: str = "", error: str = "", refresh: int = 0,
         user: str | None = None) -> str:  # fmt: skip
    """A whole page, its header saying who is logged in (`user`); with `refresh`, it
    reloads itself every that many seconds while nobody is using a form on it."""
    flash = ""
    if error:
        flash = f'<p class="error" role="alert">{escape(error)}</p>'
    elif message:
        flash = f'<p class="notice" role="status">{escape(message)}</p>'
    who = (f"<span id='user'>logged in: {escape(user)}</span>" if user
           else "<a href='/login'>log in</a>")  # fmt: skip
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body data-refresh='{refresh}'>"
            f"<p><a href='/'>durably</a> · {who} · <a href='/metrics'>metrics</a></p>"
            f"<h1>{escape(title)}</h1>{flash}{body}"
            "<script src='/refresh.js'></script></body></html>")  # fmt: skip


def _status(status: str) -> str:
    return f'<span class="s-{escape(status)}">{escape(status)}</span>'


def _json(value: Any) -> str:
    return f"<pre>{escape(json.dumps(value, indent=1, default=str))}</pre>"


def _when(value: Any) -> str:
    return escape(value.strftime("%Y-%m-%d %H:%M:%S")) if value else "-"


def run_list(runs: list[Run], filters: dict[str, str], offset: int, limit: int,
             workflows: list[str], csrf: str) -> str:  # fmt: skip
    options = "".join(
        f"<option {'selected' if filters.get('status') == s else ''}>{s}</option>" for s in STATUSES
    )
    form = (
        "<form method='get' action='/' id='filters'>"
        f"<label>status <select name='status'><option value=''>any</option>{options}</select>"
        f"</label> <label>workflow <input name='workflow' "
        f"value='{escape(filters.get('workflow', ''))}'></label> "
        f"<label>created in the last <input name='since' size='6' placeholder='1h' "
        f"value='{escape(filters.get('since', ''))}'></label> "
        f"<label>idempotency key <input name='key' "
        f"value='{escape(filters.get('key', ''))}'></label> "
        "<button type='submit'>filter</button></form>"
    )
    rows = "".join(
        f"<tr><td><a href='/runs/{escape(r.run_id)}'>{escape(r.run_id)}</a></td>"
        f"<td>{escape(r.workflow)}@{escape(r.version)}</td><td>{_status(r.status)}</td>"
        f"<td>{r.attempts}</td><td>{_when(r.created_at)}</td><td>{_when(r.finished_at)}</td>"
        f"<td>{escape(r.waiting_for or '')}</td></tr>"
        for r in runs
    )
    table = ("<table id='runs'><tr><th>run</th><th>workflow</th><th>status</th><th>attempts"
             "</th><th>created</th><th>finished</th><th>waiting for</th></tr>"
             f"{rows}</table>")  # fmt: skip
    nav = []
    if offset > 0:
        nav.append(f"<a href='/?{urlencode({**filters, 'offset': max(0, offset - limit)})}'>"
                   "newer</a>")  # fmt: skip
    if len(runs) == limit:
        nav.append(f"<a href='/?{urlencode({**filters, 'offset': offset + limit})}'>older</a>")
    return form + table + "<p>" + " · ".join(nav) + "</p>" + actions(workflows, csrf)


def queue_table(queues: list[dict[str, Any]]) -> str:
    """Each queue's limits and its running and waiting runs (none declared: nothing)."""
    if not queues:
        return ""
    rows = "".join(
        f"<tr><td><a href='/?{urlencode({'queue': q['name']})}'>{escape(q['name'])}</a></td>"
        f"<td>{q['running']}</td><td>{q['waiting']}</td>"
        f"<td>{q['concurrency'] or '-'}</td><td>{q['per_key'] or '-'}</td>"
        f"<td>{_rate(q)}</td></tr>"
        for q in queues
    )
    return ("<h2>queues</h2><table id='queues'><tr><th>queue</th><th>running</th>"
            "<th>waiting</th><th>concurrency</th><th>per key</th><th>rate</th></tr>"
            f"{rows}</table>")  # fmt: skip


def _rate(q: dict[str, Any]) -> str:
    if not q["rate_limit"]:
        return "-"
    return f"{q['rate_limit']}/{float(q['rate_period_s']):g}s"


def actions(workflows: list[str], csrf: str) -> str:
    choices = "".join(f"<option>{escape(w)}</option>" for w in workflows)
    start = (
        "<fieldset><legend>start a run</legend><form method='post' action='/start' id='start'>"
        f"<input type='hidden' name='csrf' value='{csrf}'>"
        f"<label>workflow <select name='workflow'>{choices}</select></label> "
        "<label>input (JSON) <input name='input' size='40' value='null'></label> "
        "<label>idempotency key <input name='idempotency_key'></label> "
        "<button type='submit'>start</button></form></fieldset>"
        if workflows
        else "<p>Starting runs needs the workflows: run the dashboard with --app.</p>"
    )
    signal = (
        "<fieldset><legend>send a signal</legend><form method='post' action='/signal' "
        f"id='signal'><input type='hidden' name='csrf' value='{csrf}'>"
        "<label>name <input name='name'></label> <label>data (JSON) <input name='data' "
        "value='null'></label> <label>run id (optional) <input name='run_id'></label> "
        "<button type='submit'>send</button></form></fieldset>"
    )
    return start + signal + ops.purge_form(csrf)


def run_detail(run: Run, steps: list[StepAttempt], csrf: str, events: dict[str, Any],
               completed: int) -> str:  # fmt: skip
    facts = [("status", _status(run.status)), ("workflow", escape(f"{run.workflow}@{run.version}")),
             ("attempts", str(run.attempts)), ("fence", str(run.fence)),
             ("worker", escape(run.worker_id or "-")), ("created", _when(run.created_at)),
             ("finished", _when(run.finished_at)), ("waiting for", escape(run.waiting_for or "-")),
             ("input", _json(run.input)), ("output", _json(run.output)),
             ("error", _error(run.error) if run.error else "-"),
             *ops.lineage(run, steps)]  # fmt: skip
    table = "<table id='run'>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>"
                                         for k, v in facts) + "</table>"  # fmt: skip
    cancel = "" if run.terminal else (
        f"<form method='post' action='/runs/{escape(run.run_id)}/cancel' class='inline' "
        f"id='cancel'><input type='hidden' name='csrf' value='{csrf}'>"
        "<button type='submit'>cancel this run</button></form>"
    )  # fmt: skip
    return (table + cancel + ops.signal_forms(run, csrf) + ops.run_actions(run, completed, csrf)
            + ops.events(events) + "<h2>steps</h2>" + timeline(run, steps))  # fmt: skip


def timeline(run: Run, steps: list[StepAttempt]) -> str:
    if not steps:
        return "<p>no steps yet</p>"
    start = min([s.started_at for s in steps] + [run.created_at])
    end = max([s.finished_at or s.started_at for s in steps] + [run.finished_at or start])
    span = max((end - start).total_seconds(), 1e-6)
    rows = []
    for s in steps:
        left = (s.started_at - start).total_seconds() / span * 100
        done = s.finished_at or s.started_at
        width = max(0.5, (done - s.started_at).total_seconds() / span * 100)
        took = f"{(done - s.started_at).total_seconds():.3f}s" if s.finished_at else "…"
        result = _error(s.error) if s.error else _json(s.output)
        if s.child_run_id:
            child = escape(s.child_run_id)
            result = f"<div class='child'>child <a href='/runs/{child}'>{child}</a></div>{result}"
        rows.append(
            f"<tr><td>{escape(s.step)}</td><td>{escape(s.kind)}</td><td>{s.attempt}</td>"
            f"<td>{_status(s.status)}</td><td class='lane'><div class='bar' "
            f"style='left:{left:.1f}%;width:{min(width, 100 - left):.1f}%'></div></td>"
            f"<td>{took}</td><td>{escape(s.worker_id or '')}</td><td>{result}</td></tr>"
        )
    return ("<table id='steps'><tr><th>step</th><th>kind</th><th>attempt</th><th>status</th>"
            "<th>timeline</th><th>took</th><th>worker</th><th>output / error</th></tr>"
            + "".join(rows) + "</table>")  # fmt: skip


def login(error: str = "", user: str | None = None) -> str:
    form = ("<form method='post' action='/login' id='login'><label>token <input "
            "type='password' name='token'></label> <button type='submit'>log in</button></form>"
            "<p>The token was printed when the dashboard started "
            "(or set with DURABLY_DASHBOARD_TOKEN).</p>")  # fmt: skip
    return page("log in", form, error=error, user=user)


def _error(error: dict[str, Any]) -> str:
    """An error's type and message, its traceback folded away under them."""
    head = escape(f"{error.get('type')}: {error.get('message')}")
    trace = error.get("traceback") or (error.get("cause") or {}).get("traceback")
    if not trace:
        return head
    return f"{head}<details><summary>traceback</summary><pre>{escape(trace)}</pre></details>"
