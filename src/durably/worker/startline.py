"""The line a worker logs as it starts: what it serves (workflows, queues, schedules) and
where (the database, its password masked), so a deploy's log says what runs."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from .host import Host


def start_line(host: Host, worker_id: str, slots: int) -> str:
    workflows = ", ".join(sorted(f"{n}@{v}" for n, v in host.workflows)) or "none"
    queues = sorted({wf.queue for wf in host.workflows.values() if wf.queue is not None},
                    key=lambda q: q.name)  # fmt: skip
    limits = ", ".join(f"{q.name} ({_limits(q.concurrency, q.per_key, q.rate)})" for q in queues)
    schedules = ", ".join(
        f"{wf.name}@{wf.version} {wf.schedule.cron!r} {wf.schedule.tz}"
        for wf in host.workflows.values()
        if wf.schedule is not None
    )
    line = (f"worker {worker_id} started ({slots} slots) on {masked(host.url)} "
            f"(schema {host.connector.schema}, namespace {host.namespace}): "
            f"workflows {workflows}")  # fmt: skip
    if limits:
        line += f"; queues {limits}"
    if schedules:
        line += f"; schedules {schedules}"
    return line


def _limits(concurrency: int | None, per_key: int | None, rate: str | None) -> str:
    parts = [f"concurrency {concurrency}" if concurrency else "",
             f"per key {per_key}" if per_key else "", f"rate {rate}" if rate else ""]  # fmt: skip
    return ", ".join(p for p in parts if p) or "no limit"


def masked(url: str) -> str:
    """`url` with its password, if any, as `***`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
