"""The dashboard's parts for operating runs (§4.18): where a run comes from and what it
waits for, its events, and the resume, fork and purge forms (actions need the token)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from ..store.models import Run, StepAttempt

# Reloads the page every few seconds (`data-refresh` on <body>) unless someone is using a
# form on it. Served from the dashboard itself: the page's CSP allows no inline script.
REFRESH_JS = """
let edited = false;
document.addEventListener("input", () => { edited = true; });
const every = Number(document.body.dataset.refresh || "0");
if (every > 0) {
  setInterval(() => {
    const active = document.activeElement;
    const busy = active && ["INPUT", "SELECT", "TEXTAREA"].includes(active.tagName);
    if (!edited && !busy && document.visibilityState === "visible") location.reload();
  }, every * 1000);
}
"""


def _when(value: Any) -> str:
    return escape(value.strftime("%Y-%m-%d %H:%M:%S")) if value else "-"


def _hidden(csrf: str) -> str:
    return f"<input type='hidden' name='csrf' value='{csrf}'>"


def lineage(run: Run, steps: list[StepAttempt]) -> list[tuple[str, str]]:
    """Rows for the run's table: its parent, its children, when a pending run is due, the
    runs it continues and is continued as."""
    rows = []
    if run.parent_run_id:
        rows.append(("parent", _link(run.parent_run_id)))
    children = list(dict.fromkeys(s.child_run_id for s in steps if s.child_run_id))
    if children:
        rows.append(("children", " ".join(_link(c) for c in children)))
    if run.status == "pending" and run.available_at is not None:
        rows.append(("due at", _when(run.available_at)))
    if run.status == "waiting" and run.wake_at is not None:
        rows.append(("wakes at", _when(run.wake_at)))
    if run.continued_from:  # its chain of continue-as-new runs (SPEC §4.23)
        rows.append(("continued from", _link(run.continued_from)))
    if run.continued_as:
        rows.append(("continued as", _link(run.continued_as)))
    return rows


def _link(run_id: str) -> str:
    return f"<a href='/runs/{escape(run_id)}'>{escape(run_id)}</a>"


def waited_signals(run: Run) -> list[str]:
    """The names of the signals a waiting run waits for."""
    if run.status != "waiting" or not run.waiting_for:
        return []
    labels = [part.strip() for part in run.waiting_for.split(", ")]
    return [label.removeprefix("signal:") for label in labels if label.startswith("signal:")]


def signal_forms(run: Run, csrf: str) -> str:
    forms = []
    for name in waited_signals(run):
        forms.append(
            "<form method='post' action='/signal' class='send-signal'>"
            f"{_hidden(csrf)}<input type='hidden' name='name' value='{escape(name)}'>"
            f"<input type='hidden' name='run_id' value='{escape(run.run_id)}'>"
            f"waits for signal <code>{escape(name)}</code> "
            "<label>data (JSON) <input name='data' value='null'></label> "
            "<button type='submit'>send it</button></form>"
        )
    return "".join(forms)


def events(values: dict[str, Any]) -> str:
    if not values:
        return ""
    rows = "".join(
        f"<tr><td>{escape(key)}</td><td><pre>{escape(json.dumps(value, default=str))}</pre>"
        "</td></tr>"
        for key, value in values.items()
    )
    head = "<tr><th>key</th><th>latest value</th></tr>"
    return f"<h2>events</h2><table id='events'>{head}{rows}</table>"


def run_actions(run: Run, completed_steps: int, csrf: str) -> str:
    run_id = escape(run.run_id)
    resume = (
        f"<form method='post' action='/runs/{run_id}/resume' class='inline' id='resume'>"
        f"{_hidden(csrf)}<button type='submit'>resume this run</button></form> "
        if run.status in ("failed", "canceled") and not run.compensating
        else ""
    )
    fork = (
        f"<form method='post' action='/runs/{run_id}/fork' class='inline' id='fork'>"
        f"{_hidden(csrf)}<label>fork from log entry <input name='from' size='4' "
        f"value='{completed_steps}'></label> of {completed_steps} "
        f"<label>on version <input name='version' size='8' value='{escape(run.version)}'>"
        "</label> <button type='submit'>fork</button></form>"
    )
    return f"<p>{resume}{fork}</p>"


def purge_form(csrf: str) -> str:
    return (
        "<fieldset><legend>purge finished runs</legend><form method='post' action='/purge' "
        f"id='purge'>{_hidden(csrf)}<label>finished more than <input name='older_than' "
        "size='8' value='30d'> ago</label> <label>status <select name='status'>"
        "<option value=''>any finished</option><option>completed</option><option>failed"
        "</option><option>canceled</option></select></label> "
        "<button type='submit'>purge</button></form></fieldset>"
    )
