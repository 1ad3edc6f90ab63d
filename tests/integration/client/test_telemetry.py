"""OpenTelemetry spans, checked with the SDK's in-memory exporter."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durably import Durably
from tests.helpers import scaled

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(tp)


async def test_start_run_and_steps_are_one_trace(sqlite_url: str) -> None:
    _EXPORTER.clear()
    app = Durably(sqlite_url)

    @app.workflow(name="traced", version="v1")
    async def wf(ctx: Any) -> int:
        a = await ctx.step.run("a", lambda: 1)
        await ctx.step.sleep("nap", "10ms")
        return int(await ctx.step.run("b", lambda: a + 1))

    async with app, app.worker():
        handle = await wf.start()
        assert await handle.result(timeout=scaled(10)) == 2
    spans = {s.name: s for s in _EXPORTER.get_finished_spans()}
    start, step_a, step_b = spans["durably.start traced"], spans["durably.step a"], spans[
        "durably.step b"]  # fmt: skip
    runs = [s for s in _EXPORTER.get_finished_spans() if s.name == "durably.run traced"]
    assert len(runs) == 2  # parked on the sleep, claimed again
    trace_id = start.context.trace_id
    assert all(s.context.trace_id == trace_id for s in [*runs, step_a, step_b])
    assert all(r.parent is not None and r.parent.span_id == start.context.span_id for r in runs)
    assert step_a.parent is not None and step_a.parent.span_id in {r.context.span_id for r in runs}
    assert runs[0].attributes is not None and runs[0].attributes["durably.run_id"] == handle.run_id
