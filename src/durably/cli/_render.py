"""Human output: run tables and a run's step timeline, drawn with rich."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..store.models import Run, StepAttempt

COLOURS = {
    "pending": "yellow", "running": "cyan", "waiting": "blue", "held": "bright_red",
    "continued": "bright_green",
    "completed": "green", "failed": "red", "canceled": "magenta", "abandoned": "bright_black",
}  # fmt: skip

# Piped to a file or a program, output is not a terminal's width: rich would cut every
# table at 80 columns. There, lines are as long as their content needs.
console = Console() if sys.stdout.isatty() else Console(width=10_000)


def status(value: str) -> Text:
    return Text(value, style=COLOURS.get(value, ""))


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value, default=str) if value is not None else "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def runs_table(runs: list[Run]) -> None:
    table = Table(title=f"{len(runs)} runs", title_justify="left")
    table.add_column("run", min_width=9)  # at least the 8 characters `show` takes, and "…"
    for column in ("workflow", "status", "attempts", "created", "finished", "waiting for"):
        table.add_column(column)
    for r in runs:
        table.add_row(r.run_id, f"{r.workflow}@{r.version}", status(r.status), str(r.attempts),
                      _when(r.created_at), _when(r.finished_at), r.waiting_for or "")  # fmt: skip
    console.print(table)


def run_summary(run: Run) -> None:
    console.print(Text.assemble(
        ("run ", "bold"), (run.run_id, "bold"), f"  {run.workflow}@{run.version}  ",
        status(run.status), f"  attempts {run.attempts}  fence {run.fence}",
    ))  # fmt: skip
    console.print(f"input  {_short(run.input, 100)}")
    if run.attributes:  # search attributes (SPEC §4.24)
        shown = "  ".join(f"{k}={_short(v, 40)}" for k, v in sorted(run.attributes.items()))
        console.print(f"attributes  {shown}")
    if run.output is not None:
        console.print(f"output {_short(run.output, 100)}")
    if run.error:
        console.print(Text(f"error  {run.error.get('type')}: {run.error.get('message')}", "red"))
    if run.waiting_for:
        console.print(f"waiting for {run.waiting_for} (until {_when(run.wake_at)})")
    if run.continued_from:  # continue-as-new (SPEC §4.23): the links of the run's chain
        console.print(f"continued_from {run.continued_from}")
    if run.continued_as:
        console.print(f"continued_as {run.continued_as}")
    if run.debounce_key:  # started by a debounced start (SPEC §4.23)
        console.print(f"debounce_key {run.debounce_key}")


def timeline(run: Run, steps: list[StepAttempt], width: int = 30) -> None:
    """Each attempt as a row with a bar placed on the run's time span."""
    run_summary(run)
    if not steps:
        console.print("no steps yet")
        return
    start = min([s.started_at for s in steps] + [run.created_at])
    ends = [s.finished_at or s.started_at for s in steps] + [run.finished_at or start]
    span = max((max(ends) - start).total_seconds(), 1e-6)
    table = Table(show_edge=False)
    for column in ("step", "kind", "attempt", "status", "timeline", "took", "worker", "result"):
        table.add_column(column)
    for s in steps:
        begin = int((s.started_at - start).total_seconds() / span * width)
        end = s.finished_at or s.started_at
        length = max(1, int((end - s.started_at).total_seconds() / span * width))
        bar = Text(" " * begin + "█" * min(length, width - begin),
                   style=COLOURS.get(s.status, ""))  # fmt: skip
        took = f"{(end - s.started_at).total_seconds():.3f}s" if s.finished_at else "…"
        result = _short(s.error.get("message") if s.error else s.output, 40)
        table.add_row(s.step, s.kind, str(s.attempt), status(s.status), bar, took,
                      s.worker_id or "", result)  # fmt: skip
    console.print(table)
    failed = [s for s in steps if s.error and s.error.get("traceback")]
    if failed:  # the last failure's traceback: where a person starts debugging
        last = failed[-1]
        console.print(Text(f"traceback of step {last.step!r}, attempt {last.attempt}:", "bold"))
        console.print(Text(str(last.error["traceback"]).rstrip(), "red"))  # type: ignore[index]
    elif run.error and run.error.get("traceback"):
        console.print(Text("traceback:", "bold"))
        console.print(Text(str(run.error["traceback"]).rstrip(), "red"))


def signals_table(signals: list[dict[str, Any]]) -> None:
    table = Table(title=f"{len(signals)} signals", title_justify="left")
    for column in ("id", "name", "data", "created", "expires", "consumed by"):
        table.add_column(column)
    for s in signals:
        table.add_row(str(s["id"]), s["name"], _short(s["data"], 40), s["created_at"][:19],
                      (s["expires_at"] or "-")[:19], s["consumed_by"] or "")  # fmt: skip
    console.print(table)


def events(values: dict[str, Any]) -> None:
    if values:
        console.print(Text("events", "bold"))
        for key, value in values.items():
            console.print(f"  {key} = {_short(value, 100)}")
