"""How orders look: JSON documents and rich tables."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from durably import Run, StepAttempt

console = Console()
COLOURS = {"pending": "yellow", "running": "cyan", "waiting": "blue", "completed": "green",
           "failed": "red", "canceled": "magenta", "abandoned": "bright_black"}  # fmt: skip


def _progress(steps: list[StepAttempt]) -> float | None:
    checks = [s for s in steps if s.step == "check-download" and s.status == "completed"]
    return float(checks[-1].output["progress"]) if checks else None


def order_doc(run: Run, steps: list[StepAttempt]) -> dict[str, Any]:
    """One order as JSON: its run, where it is, and its download progress."""
    current = steps[-1].step if steps else None
    return {
        "id": (run.input or {}).get("id"), "run_id": run.run_id, "status": run.status,
        "step": current, "progress": _progress(steps), "waiting_for": run.waiting_for,
        "path": (run.output or {}).get("path"), "error": run.error,
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


def print_orders(found: list[tuple[Run, list[StepAttempt]]], detail: bool) -> None:
    if detail:
        for run, steps in found:
            console.print(steps_table(run, steps))
        return
    table = Table(title=f"{len(found)} orders", title_justify="left")
    for column in ("order", "status", "step", "progress", "library path / error"):
        table.add_column(column)
    for run, steps in found:
        doc = order_doc(run, steps)
        progress = f"{doc['progress'] * 100:.0f}%" if doc["progress"] is not None else "-"
        where = doc["path"] or (run.error or {}).get("message") or ""
        table.add_row(doc["id"], Text(run.status, COLOURS.get(run.status, "")),
                      doc["step"] or "-", progress, where)  # fmt: skip
    console.print(table)
