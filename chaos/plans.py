"""The plans of the soak's runs: each run the load generator starts comes from a `Plan`,
drawn at random from the mixed workload, that says what the run must end as."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

COMPENSABLE = {"reserve", "charge", "prepare"}
CHILD_MODES = {"ok": "completed", "bad": "failed", "slow": "canceled"}  # child status by name


# ------------------------------------------------------------------ plans


@dataclass
class Plan:
    """One run the load generator starts, and what it must end as."""

    key: str  # the run's idempotency key
    workflow: str
    spec: dict[str, Any]
    expect_status: str = "completed"
    expect_output: Any = None
    expect_error: str | None = None  # the error type of a run that must fail
    deadline_s: float | None = None
    cancel_after: float | None = None
    # (idempotency key, data); no key: a plain send, looked up after a lost reply
    signals: list[tuple[str | None, Any]] = field(default_factory=list)
    signal_after_wait: bool = False
    sent: list[dict[str, Any]] = field(default_factory=list)  # what each send reported
    run_id: str | None = None
    cancel: str = "none"  # none | canceled | refused | uncertain (a retried cancel was refused)
    canceled_at: float | None = None  # when the cancel call returned (time.time())
    driver_error: str | None = None
    answers: list[Any] = field(default_factory=list)  # what each `app.request` returned
    read: list[Any] = field(default_factory=list)  # what a reader of its stream got


def _steps(rng: random.Random) -> Plan:
    millis = [0, 0, 10, 50, 200, 1500]
    steps = [[rng.randrange(1000), rng.choice(millis)] for _ in range(rng.randint(2, 5))]
    flaky, caught = rng.choice([None, 0, 1, 2]), rng.random() < 0.4
    out: list[Any] = [v for v, _ in steps]
    out += ["flaky-ok"] * (flaky is not None) + ["caught"] * caught
    spec = {"steps": steps, "flaky": flaky, "caught": caught, "exits": rng.random() < 0.3}
    return Plan("", "chaos-steps", spec, expect_output=out)


def _gather(rng: random.Random) -> Plan:
    branches = [
        [["z", 0, rng.choice([0, 50, 300])] if rng.random() < 0.15
         else ["s", rng.randrange(1000), rng.choice([0, 0, 20, 100, 800])]
         for _ in range(rng.randint(1, 3))]
        for _ in range(rng.randint(2, 4))
    ]  # fmt: skip
    out = [[None if kind == "z" else v for kind, v, _ in items] for items in branches]
    return Plan("", "chaos-gather", {"branches": branches}, expect_output=out)


def _signals(rng: random.Random, key: str) -> Plan:
    topic = f"topic:{key}"
    data = [{"topic": topic, "n": 1}, {"topic": topic, "n": 2}]
    keyed = rng.random() < 0.5  # else plain sends: one statement each (see `_send`)
    keys = [f"{key}:1", f"{key}:2"] if keyed else [None, None]
    return Plan("", "chaos-signals", {"topic": topic}, expect_output=[*data, {"own": topic}],
                signals=list(zip(keys, data, strict=True)),
                signal_after_wait=rng.random() < 0.5)  # fmt: skip


def _children(rng: random.Random) -> Plan:
    value = rng.randrange(1000)
    spec = {"value": value, "timeout_ms": rng.choice([500, 1500, 3000])}
    return Plan("", "chaos-children", spec, expect_output=[value, "child failed", "timed out"])


def _ledger(rng: random.Random) -> Plan:
    n = rng.randint(1, 3)
    spec = {"n": n, "roll_back_once": rng.choice([-1, *range(n)])}
    out = [x for i in range(n) for x in (f"booked:t{i}", i)]
    return Plan("", "chaos-ledger", spec, expect_output=out)


def _saga(rng: random.Random) -> Plan:
    end = rng.choices(["ship", "fail", "hold"], [4, 3, 3])[0]
    hold_ms = rng.randint(4000, 10000)
    spec = {"end": end, "hold_ms": hold_ms, "exits": rng.random() < 0.3}
    plan = Plan("", "chaos-saga", spec, expect_output="shipped")
    if end == "fail":
        plan.expect_status, plan.expect_output = "failed", None
    if end == "hold":
        plan.cancel_after = rng.uniform(0.3, hold_ms / 1000 * 0.6)
    return plan


def _deadline(rng: random.Random) -> Plan:
    return Plan("", "chaos-deadline", {}, expect_status="failed",
                expect_error="DeadlineExceeded", deadline_s=rng.uniform(1.5, 4))  # fmt: skip


def _chain(rng: random.Random) -> Plan:
    values = [rng.randrange(1000) for _ in range(rng.randint(2, 6))]
    spec = {"values": values, "gen": 0, "total": 0, "millis": rng.choice([0, 10, 200])}
    return Plan("", "chaos-chain", spec, expect_output=sum(values))


def _stream(rng: random.Random) -> Plan:
    n = rng.randint(3, 40)
    pauses = sorted(rng.sample(range(n), rng.randint(0, min(n, 4))))
    spec = {"n": n, "pauses": pauses, "millis": rng.choice([0, 10, 200])}
    return Plan("", "chaos-stream", spec, expect_output=n)


def make_plan(rng: random.Random, number: int) -> Plan:
    """The plan of the `number`-th run: a random kind of the mixed workload."""
    key = f"c{number:05d}"
    kind = rng.choices(["steps", "gather", "signals", "children", "ledger", "saga", "deadline",
                        "requests", "chain", "stream"],
                       [3, 3, 2, 1.5, 2, 1.5, 0.7, 1, 1.5, 1])[0]  # fmt: skip
    if kind == "requests":
        plan = Plan("", "chaos-requests", {}, expect_output=[1, 2])
    elif kind == "signals":
        plan = _signals(rng, key)
    else:
        make = {"steps": _steps, "gather": _gather, "children": _children, "ledger": _ledger,
                "saga": _saga, "deadline": _deadline, "chain": _chain,
                "stream": _stream}[kind]  # fmt: skip
        plan = make(rng)
    plan.key = key
    if plan.cancel_after is None and plan.deadline_s is None and rng.random() < 0.06:
        plan.cancel_after = rng.uniform(0.05, 2.0)  # a cancel of a random run
    return plan
