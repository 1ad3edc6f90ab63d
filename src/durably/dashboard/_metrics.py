"""`/metrics` in the Prometheus text format, read from the database on each scrape."""

from __future__ import annotations

from typing import Any

from ..client.durably import Durably

_HELP = {
    "durably_runs": ("gauge", "Runs by status (held: waiting for code that matches its history)."),
    "durably_step_attempts": ("gauge", "Step attempts by status."),
    "durably_queue_depth": ("gauge", "Runs that are due and not yet claimed."),
    "durably_claim_latency_seconds": ("gauge",
        "Mean time from creation to first claim, runs started in the last 5 minutes."),
    "durably_worker_last_heartbeat_age_seconds": ("gauge", "Seconds since each live worker "
                                                  "was last seen."),
    "durably_queue_running": ("gauge", "Runs of each queue (app.queue) holding a slot: "
                              "running, or running their compensations."),
    "durably_queue_waiting": ("gauge", "Pending runs of each queue, waiting for a slot."),
}  # fmt: skip
_NAMES = {"runs": ("durably_runs", "status"), "steps": ("durably_step_attempts", "status"),
          "due": ("durably_queue_depth", ""),
          "claim_latency_avg": ("durably_claim_latency_seconds", ""),
          "worker_seen_age": ("durably_worker_last_heartbeat_age_seconds", "worker"),
          "queue_running": ("durably_queue_running", "queue"),
          "queue_pending": ("durably_queue_waiting", "queue")}  # fmt: skip


async def collect(app: Durably) -> list[dict[str, Any]]:
    await app.open()
    rows: list[dict[str, Any]] = list(await app.store.metrics())
    # Every queue declared (in the database, or by this app): a sample even at zero.
    queues = {q["name"]: q for q in await app.queue_counts()}
    for name in app.queues:
        queues.setdefault(name, {"running": 0, "waiting": 0})
    for name, q in sorted(queues.items()):
        rows.append({"metric": "queue_running", "label": name, "value": q["running"]})
        rows.append({"metric": "queue_pending", "label": name, "value": q["waiting"]})
    return rows


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(rows: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    by_name: dict[str, list[str]] = {name: [] for name in _HELP}
    for row in rows:
        name, label = _NAMES[row["metric"]]
        labels = f'{{{label}="{_label(str(row["label"]))}"}}' if label else ""
        by_name[name].append(f"{name}{labels} {float(row['value'])}")
    for name, (kind, text) in _HELP.items():
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        lines += by_name[name] or ([f"{name} 0.0"] if name == "durably_queue_depth" else [])
    return "\n".join(lines) + "\n"
