"""OpenTelemetry spans for starts, run executions and steps, when `opentelemetry-api` is
installed (`pip install durably[otel]`) and a tracer provider is configured; otherwise
every function here returns a shared no-op context at the cost of one check.

The trace context of `start()` is stored with the run, so the worker's execution span
continues the trace that started the run, across processes and restarts.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # the optional extra is not installed
    trace = None  # type: ignore[assignment]
    propagate = None  # type: ignore[assignment]

_NOTHING: AbstractContextManager[Any] = contextlib.nullcontext()


def _active() -> bool:
    return trace is not None and not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


@contextlib.contextmanager
def start_span(workflow: str, version: str) -> Iterator[dict[str, str]]:
    """A span around starting a run; yields the carrier to store with the run."""
    carrier: dict[str, str] = {}
    if not _active():
        yield carrier
        return
    attributes = {"durably.workflow": workflow, "durably.version": version}
    with trace.get_tracer("durably").start_as_current_span(
        f"durably.start {workflow}", attributes=attributes, kind=trace.SpanKind.PRODUCER
    ):
        propagate.inject(carrier)
        yield carrier


def encode_carrier(carrier: dict[str, str]) -> str | None:
    return json.dumps(carrier) if carrier else None


def run_span(row: dict[str, Any]) -> AbstractContextManager[Any]:
    """A span around one execution (claim) of a run, child of its start's span."""
    if not _active():
        return _NOTHING
    stored = row.get("trace_context")
    parent = propagate.extract(json.loads(stored)) if stored else None
    attributes = {"durably.run_id": row["id"], "durably.workflow": row["workflow"],
                  "durably.version": row["version"], "durably.fence": row["fence"],
                  "durably.attempt": row["attempts"]}  # fmt: skip
    return trace.get_tracer("durably").start_as_current_span(
        f"durably.run {row['workflow']}", context=parent, kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
    )  # fmt: skip


def step_span(name: str, kind: str, attempt: int) -> AbstractContextManager[Any]:
    """A span around one step attempt's execution (not its replay), child of its run's.

    None unless the run's span is recorded: a step's lifecycle runs in its execution's
    context, so the current span tells (a contextvar read, where asking for the tracer
    provider is an `os.environ` lookup, 3-4% of a worker's CPU at 3 steps a run)."""
    if trace is None or not trace.get_current_span().is_recording():
        return _NOTHING
    attributes: dict[str, Any] = {
        "durably.step": name, "durably.kind": kind, "durably.attempt": attempt,
    }  # fmt: skip
    return trace.get_tracer("durably").start_as_current_span(
        f"durably.step {name}", attributes=attributes
    )
