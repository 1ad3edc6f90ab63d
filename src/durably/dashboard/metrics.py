"""`/metrics` for Prometheus, through prometheus_client: a Collector of what one scrape
reads from the database (runs and step attempts by status, the due runs, the claim
latency, each live worker's heartbeat age, each queue's running and waiting runs), in the
format the scraper asks for (the text format 0.0.4 by default, or OpenMetrics)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from starlette.requests import Request
from starlette.responses import Response

from ..client.durably import Durably

# Each figure the database reads (`metric` of a row): its gauge, its label, its help.
_GAUGES = {
    "runs": ("durably_runs", "status",
             "Runs by status (held: waiting for code that matches its history)."),
    "steps": ("durably_step_attempts", "status", "Step attempts by status."),
    "due": ("durably_queue_depth", "", "Runs that are due and not yet claimed."),
    "claim_latency_avg": ("durably_claim_latency_seconds", "",
                          "Mean time from creation to first claim, runs started in the last "
                          "5 minutes."),
    "worker_seen_age": ("durably_worker_last_heartbeat_age_seconds", "worker",
                        "Seconds since each live worker was last seen."),
    "queue_running": ("durably_queue_running", "queue",
                      "Runs of each queue (app.queue) holding a slot: running, or running "
                      "their compensations."),
    "queue_pending": ("durably_queue_waiting", "queue",
                      "Pending runs of each queue, waiting for a slot."),
}  # fmt: skip


class Figures:
    """A prometheus_client Collector of `rows`, the figures one scrape read (`read`)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def collect(self) -> Iterator[Metric]:
        gauges = {metric: GaugeMetricFamily(name, text, labels=[label] if label else [])
                  for metric, (name, label, text) in _GAUGES.items()}  # fmt: skip
        for row in self.rows:
            labels = [str(row["label"])] if _GAUGES[row["metric"]][1] else []
            gauges[row["metric"]].add_metric(labels, float(row["value"]))
        if not gauges["due"].samples:  # a scraper alerting on it sees 0, not nothing
            gauges["due"].add_metric([], 0.0)
        yield from gauges.values()


async def read(app: Durably) -> list[dict[str, Any]]:
    """The figures, as (metric, label, value) rows."""
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


class Metrics:
    """The `/metrics` page of `app`: read at each scrape, nothing kept between them."""

    def __init__(self, app: Durably) -> None:
        self.app = app

    async def scrape(self, request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        body = encode(Figures(await read(self.app)))
        return Response(body, headers={"Content-Type": content_type})
