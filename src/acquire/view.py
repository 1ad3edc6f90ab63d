"""How orders look: JSON documents and rich tables (state, progress, speed, ETA)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from durably import Run, StepAttempt

console = Console() if sys.stdout.isatty() else Console(width=10_000)  # piped: not cut at 80
COLOURS = {"pending": "yellow", "running": "cyan", "waiting": "blue", "completed": "green",
           "failed": "red", "canceled": "magenta", "abandoned": "bright_black",
           "queued": "yellow", "downloading": "cyan", "importing": "cyan", "seeding": "blue",
           "done": "green", "stalled": "red"}  # fmt: skip
PHASES = {"submit-download": "submitting", "wait-download": "downloading",
          "copy-file": "importing", "register": "importing", "retention": "seeding",
          "seeding": "seeding", "cleanup": "cleaning up"}  # fmt: skip


def state_of(run: Run, steps: list[StepAttempt]) -> str:
    """The order's state in words: queued, downloading, importing, seeding, done, stalled..."""
    if run.status == "pending" and not steps:
        return "queued"
    if run.status == "completed":
        return "done"
    if run.status == "failed":
        message = str((run.error or {}).get("message", ""))
        return "stalled" if message.startswith("stalled") else "failed"
    if run.status == "canceled":
        return "canceled"
    phases = [PHASES[s.step] for s in steps if s.step in PHASES]
    return phases[-1] if phases else "queued"


def submitted(steps: list[StepAttempt]) -> dict[str, Any] | None:
    """The submit step's output (client, hash), once it completed."""
    for s in steps:
        if s.step == "submit-download" and s.status == "completed":
            return dict(s.output or {})
    return None


def order_doc(
    run: Run, steps: list[StepAttempt], live: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One order as JSON: its run, state, progress, speed, ETA and library path.

    Args:
        live: the client's status of the download now (progress, speed, eta), if known.
    """
    state = state_of(run, steps)
    progress = (live or {}).get("progress")
    if state in ("importing", "seeding", "cleaning up", "done"):
        progress = 1.0
    return {
        "id": (run.input or {}).get("id"), "run_id": run.run_id, "status": run.status,
        "state": state, "step": steps[-1].step if steps else None, "progress": progress,
        "speed": (live or {}).get("speed") if state == "downloading" else None,
        "eta": (live or {}).get("eta") if state == "downloading" else None,
        "waiting_for": run.waiting_for, "path": (run.output or {}).get("path"),
        "error": run.error,
        "steps": [{"step": s.step, "status": s.status, "attempt": s.attempt} for s in steps],
    }  # fmt: skip


def steps_table(run: Run, steps: list[StepAttempt]) -> Table:
    title = Text.assemble(f"run {run.run_id}  ", (run.status, COLOURS.get(run.status, "")))
    table = Table(title=title, title_justify="left", show_edge=False)
    for column in ("step", "attempt", "status", "took"):
        table.add_column(column, no_wrap=True)
    table.add_column("result", no_wrap=True, overflow="ellipsis", max_width=28)
    for s in steps:
        took = (f"{(s.finished_at - s.started_at).total_seconds():.2f}s"
                if s.finished_at else "…")  # fmt: skip
        result = s.error.get("message") if s.error else s.output
        text = "" if result is None else json.dumps(result, default=str)
        table.add_row(s.step, str(s.attempt), Text(s.status, COLOURS.get(s.status, "")), took,
                      text)  # fmt: skip
    return table


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _eta(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}d{h:02d}h" if d else f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def orders_table(docs: list[dict[str, Any]]) -> Table:
    """Every order on one line: state, progress, speed, ETA, library path or error."""
    table = Table(title=f"{len(docs)} orders", title_justify="left")
    for column in ("order", "state", "progress", "speed", "ETA", "library path / error"):
        table.add_column(column, no_wrap=column != "library path / error")
    for doc in docs:
        progress = f"{doc['progress'] * 100:.1f}%" if doc["progress"] is not None else "-"
        speed = f"{_size(doc['speed'])}/s" if doc["speed"] is not None else "-"
        where = doc["path"] or (doc["error"] or {}).get("message") or ""
        table.add_row(doc["id"], Text(doc["state"], COLOURS.get(doc["state"], "")), progress,
                      speed, _eta(doc["eta"]), where)  # fmt: skip
    return table


def print_orders(found: list[tuple[Run, list[StepAttempt]]], docs: list[dict[str, Any]],
                 detail: bool) -> None:  # fmt: skip
    if detail:
        for run, steps in found:
            console.print(steps_table(run, steps))
        return
    console.print(orders_table(docs))
