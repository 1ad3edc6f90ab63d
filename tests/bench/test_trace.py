"""`python -m bench latency --trace`: the hop breakdown is produced, in order, and its hops
sum to the sample's total (structure only: no time is asserted)."""

from __future__ import annotations

import math

import pytest

from bench import scenarios, tracing

HOPS = [
    "start prep",
    "start commit",
    "notify",
    "claim wait",
    "claim",
    "step 1 body",
    "step 1 record",
    "step 2 body",
    "step 2 record",
    "end wait",
    "end commit",
    "client wake-up",
]


def test_the_hops_of_a_sample_cut_its_span_in_order() -> None:
    tracer = tracing.Tracer()
    tracer.notices.append(tracing.Notice(1.5, "run"))
    tracer.calls += [
        tracing.Call(1.1, 1.1, 1.4, ["insert_run"]),
        tracing.Call(1.6, 1.6, 2.0, ["claim"]),
        tracing.Call(2.2, 2.2, 2.5, ["record_many"]),
        tracing.Call(2.6, 2.6, 2.9, ["record_many"]),
        tracing.Call(3.0, 3.0, 3.5, ["finish_many"]),
    ]
    sample = tracing.breakdown(tracer, t0=1.0, started=1.45, seen=4.0)
    assert list(sample["hops_ms"]) == HOPS
    assert sample["hops_ms"]["claim"] == pytest.approx(400)
    assert sum(sample["hops_ms"].values()) == pytest.approx(sample["total_ms"], abs=0.01)
    assert sample["transactions"] == 5
    assert sample["statements"][0] == "insert_run"


def test_a_hop_not_seen_leaves_its_time_to_the_next() -> None:
    """No NOTIFY heard (the worker found the run by polling) and a mark out of order: the
    hops still sum to the total and none is negative."""
    tracer = tracing.Tracer()
    tracer.calls += [
        tracing.Call(1.6, 1.6, 2.0, ["claim"]),
        tracing.Call(1.7, 1.7, 1.8, ["finish_many"]),  # asked before the claim was done
    ]
    sample = tracing.breakdown(tracer, t0=1.0, started=1.2, seen=3.0)
    assert "notify" not in sample["hops_ms"]
    assert "start prep" not in sample["hops_ms"]  # no insert_run seen: the call is one hop
    assert min(sample["hops_ms"].values()) >= 0
    assert sum(sample["hops_ms"].values()) == pytest.approx(sample["total_ms"], abs=0.01)


async def test_latency_trace_breaks_each_sample_into_hops(pg_url: str) -> None:
    result = await scenarios.latency(pg_url, n=3, gap_ms=0, mode="latency", trace=True)
    trace = result["trace"]
    assert trace["samples"] == 3
    assert set(trace["hops_ms"]) <= set(HOPS)
    for hop in ("start commit", "claim", "step 1 record", "end commit", "client wake-up"):
        assert hop in trace["hops_ms"], trace
    # The order they happen in (a hop not seen in a sample is left out, not reordered).
    assert list(trace["hops_ms"]) == [hop for hop in HOPS if hop in trace["hops_ms"]]
    for sample in trace["each"]:
        assert math.isclose(sum(sample["hops_ms"].values()), sample["total_ms"], abs_tol=0.05)
    assert trace["transactions"] >= 4  # start, claim, a record at least, the end
    assert {"insert_run", "claim", "finish_many"} <= set(trace["statements"])


async def test_trace_is_refused_where_it_sees_nothing(sqlite_url: str) -> None:
    with pytest.raises(SystemExit, match="--trace"):
        await scenarios.latency(sqlite_url, n=1, gap_ms=0, mode="latency", trace=True)
