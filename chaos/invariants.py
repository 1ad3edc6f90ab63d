"""The system-wide invariants checked once the backlog has drained, and the soak's report.

Every check reads what the engine reports through its public API (`list_runs`,
`list_steps`), the business table and the ledger, never the engine's tables, and counts:
how many things it checked, and each violation with the run it concerns.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from durably import Durably, Run, StepAttempt

from .faults import Fault
from .plans import CHILD_MODES, COMPENSABLE, Plan
from .workload import version_in

EXAMPLES = 5  # violations shown per check (all are counted)


@dataclass
class Check:
    """One invariant: how many things it covered, and what broke it."""

    title: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)

    def expect(self, ok: bool, violation: str) -> None:
        self.checked += 1
        if not ok:
            self.violations.append(violation)


@dataclass
class Evidence:
    """Everything the checks read, gathered after the drain."""

    plans: dict[str, Plan]
    runs: list[Run]
    steps: dict[str, list[StepAttempt]]
    ledger: list[dict[str, Any]]
    effects: list[tuple[str, str]]
    faults: list[Fault]
    stuck: list[Run]
    undrained: int  # load-generator tasks still unfinished at the drain's deadline
    deploys: dict[str, str]  # each worker the soak started, and the deploy it ran
    deaths: list[str] = field(default_factory=list)  # workers that exited with no fault


async def gather_evidence(app: Durably, **rest: Any) -> Evidence:
    """Every run and every step attempt the engine has, plus `rest` (see `Evidence`)."""
    runs = await all_runs(app)
    steps: dict[str, list[StepAttempt]] = {}
    gate = asyncio.Semaphore(8)

    async def load(run_id: str) -> None:
        async with gate:
            steps[run_id] = await app.list_steps(run_id)

    await asyncio.gather(*(load(r.run_id) for r in runs))
    stuck = await app.list_stuck(limit=1000)
    return Evidence(runs=runs, steps=steps, stuck=stuck, **rest)


async def all_runs(app: Durably) -> list[Run]:
    """Every run the engine has, children included."""
    runs: list[Run] = []
    while True:
        page = await app.list_runs(limit=1000, offset=len(runs))
        runs += page
        if len(page) < 1000:
            return runs


def check_all(ev: Evidence) -> list[Check]:
    return [check_states(ev), check_lost(ev), check_stuck(ev), check_running(ev),
            check_completed_once(ev), check_effects(ev), check_executions(ev), check_fences(ev),
            check_after_cancel(ev), check_signals(ev), check_requests(ev), check_streams(ev),
            check_compensations(ev), check_children(ev), check_deploys(ev), check_deaths(ev),
            check_chains(ev)]  # fmt: skip


def _by_key(ev: Evidence) -> dict[str, Run]:
    return {r.idempotency_key: r for r in ev.runs if r.idempotency_key}


def check_states(ev: Evidence) -> Check:
    c = Check("every run ended in its expected terminal state (status, output, error)")
    runs = _by_key(ev)
    for plan in ev.plans.values():
        run = runs.get(plan.key)
        if run is None or not run.done:
            continue  # lost or stuck: their own checks
        allowed = {"canceled": {"canceled"}, "uncertain": {"canceled", plan.expect_status}}
        statuses = allowed.get(plan.cancel, {plan.expect_status})
        where = f"{plan.workflow} {run.run_id} ({plan.key}, cancel {plan.cancel})"
        ok = run.status in statuses
        if ok and run.status == "completed":
            ok = run.output == plan.expect_output
        if ok and run.status == "failed" and plan.expect_error:
            ok = (run.error or {}).get("type") == plan.expect_error
        got = f"{run.status} {_short(run.output)} {_short(run.error)}"
        want = f"{'/'.join(sorted(statuses))} {_short(plan.expect_output)}"
        c.expect(ok, f"{where}: {got}; expected {want}")
    return c


def check_lost(ev: Evidence) -> Check:
    c = Check("zero runs lost or appeared from nowhere (started once, found once)")
    runs, ids = _by_key(ev), {r.run_id for r in ev.runs}
    for plan in ev.plans.values():
        run = runs.get(plan.key)
        if plan.driver_error:
            c.expect(False, f"{plan.key} {plan.run_id}: a client call failed: {plan.driver_error}")
            continue
        c.expect(run is not None and plan.run_id in (None, run.run_id, _root(ev, run)),
                 f"{plan.key}: started as {plan.run_id}, the engine has "
                 f"{run.run_id if run else 'no run'}")  # fmt: skip
    for run in ev.runs:
        if run.idempotency_key is None:  # a child, or a run of a chain the newest holds
            c.expect(run.parent_run_id in ids or run.continued_as in ids,
                     f"{run.run_id}: a run no one started")  # fmt: skip
        elif run.idempotency_key not in ev.plans:
            c.expect(False, f"{run.run_id}: key {run.idempotency_key} was never used")
    return c


def _root(ev: Evidence, run: Run) -> str:
    """The first run of `run`'s chain of continue-as-new runs."""
    by_id = {r.run_id: r for r in ev.runs}
    while run.continued_from in by_id:
        run = by_id[run.continued_from]
    return run.run_id


def check_chains(ev: Evidence) -> Check:
    c = Check("each chain of continue-as-new runs ran each generation once, and ended once")
    by_id = {r.run_id: r for r in ev.runs}
    chained = 0
    for plan in ev.plans.values():
        if plan.workflow != "chaos-chain" or plan.run_id not in by_id:
            continue
        runs = [by_id[plan.run_id]]
        while runs[-1].continued_as in by_id:
            runs.append(by_id[runs[-1].continued_as])
        chained += len(runs)
        gens = [r.input["gen"] for r in runs]
        last = runs[-1]
        c.expect(gens == list(range(len(runs))) and last.continued_as is None
                 and all(r.status == "continued" for r in runs[:-1])
                 and (last.status != "completed" or len(runs) == len(plan.spec["values"])),
                 f"{plan.key} {plan.run_id}: generations {gens}, statuses "
                 f"{[r.status for r in runs]}")  # fmt: skip
    found = sum(r.workflow == "chaos-chain" for r in ev.runs)
    c.expect(found == chained, f"{found} chaos-chain runs, {chained} in the plans' chains")
    return c


def check_stuck(ev: Evidence) -> Check:
    c = Check("zero stuck runs (all terminal, compensations done, `runs --stuck` empty)")
    for run in ev.runs:
        c.expect(run.done, f"{run.workflow} {run.run_id} is still {run.status}"
                           f"{' (compensating)' if run.compensating else ''}")  # fmt: skip
    for run in ev.stuck:
        c.expect(False, f"listed stuck: {run.workflow} {run.run_id} {run.status}")
    c.expect(ev.undrained == 0, f"{ev.undrained} load-generator tasks never saw their run end")
    return c


def check_running(ev: Evidence) -> Check:
    c = Check("no step attempt left `running`")
    for run_id, steps in ev.steps.items():
        for s in steps:
            c.expect(s.status != "running", f"{run_id} {s.step} attempt {s.attempt} running")
    return c


def check_completed_once(ev: Evidence) -> Check:
    c = Check("no step recorded completed twice")
    for run_id, steps in ev.steps.items():
        done = Counter((s.position, s.step) for s in steps if s.status == "completed")
        for (position, step), n in done.items():
            c.expect(n == 1, f"{run_id} {step} (position {position}) completed {n} times")
    return c


def check_effects(ev: Evidence) -> Check:
    c = Check("each step.transaction effect exists exactly once (none for uncommitted steps)")
    rows = Counter(ev.effects)
    recorded: Counter[tuple[str, str]] = Counter()
    for run_id, steps in ev.steps.items():
        for s in steps:
            if s.kind == "transaction":
                recorded[(run_id, s.step)] += s.status == "completed"
    for key in sorted(set(rows) | set(recorded)):
        c.expect(rows[key] == recorded[key], f"{key[0]} {key[1]}: {rows[key]} business rows, "
                                             f"{recorded[key]} completed records")  # fmt: skip
    return c


def _hit(faults: list[Fault], worker: str, since: float, until: float) -> Fault | None:
    for f in faults:
        if f.target in (worker, "*") and f.t1 >= since and f.t0 <= until:
            return f
    return None


def check_executions(ev: Evidence) -> Check:
    c = Check("no step body ran more often than once plus the faults that hit it while running")
    executions: dict[tuple[str, str], dict[tuple[str, int, int], dict[str, Any]]] = {}
    failed: set[tuple[str, str, str, int, int]] = set()
    for line in ev.ledger:
        ident = (line["worker"], line["fence"], line["attempt"])
        if line["event"] == "start":
            executions.setdefault((line["run"], line["step"]), {})[ident] = line
        elif line["event"] == "fail":
            failed.add((line["run"], line["step"], *ident))
    for (run_id, step), by_ident in executions.items():
        ran = sorted((x for i, x in by_ident.items() if (run_id, step, *i) not in failed),
                     key=lambda x: x["t"])  # fmt: skip
        unexplained = [
            f"{a['worker']}@{a['t']:.2f}->{b['worker']}@{b['t']:.2f}"
            for a, b in itertools.pairwise(ran)
            if _hit(ev.faults, a["worker"], a["t"], b["t"]) is None
        ]
        c.expect(not unexplained, f"{run_id} {step} ran {len(ran)} times; re-run with no fault "
                                  f"on the worker: {', '.join(unexplained)}")  # fmt: skip
    return c


def check_fences(ev: Evidence) -> Check:
    c = Check("each fence a body was handed belongs to one worker (a claim's, never reused)")
    holders: dict[tuple[str, int], set[str]] = defaultdict(set)
    for line in ev.ledger:
        if line["event"] == "start":
            holders[(line["run"], line["fence"])].add(f"{line['worker']}/{line.get('pid')}")
    for (run_id, fence), workers in sorted(holders.items()):
        c.expect(len(workers) == 1, f"{run_id}: fence {fence} handed to bodies on "
                                    f"{', '.join(sorted(workers))}")  # fmt: skip
    return c


def check_after_cancel(ev: Evidence, slack: float = 1.0) -> Check:
    c = Check("no step body started >1 s after its run's cancel returned "
              "(unless a fault cut its worker off)")  # fmt: skip
    canceled = {p.run_id: p.canceled_at for p in ev.plans.values() if p.canceled_at}
    for line in ev.ledger:
        at = canceled.get(line["run"])
        if at is None or line["event"] != "start" or line["step"].startswith("compensate:"):
            continue
        late = line["t"] - at > slack
        c.expect(not late or _hit(ev.faults, line["worker"], at, line["t"]) is not None,
                 f"{line['run']} {line['step']} started on {line['worker']} "
                 f"{line['t'] - at:.2f} s after the cancel")  # fmt: skip
    return c


def reruns(ev: Evidence) -> int:
    """Executions beyond the first of a step body, designed failures aside (for the report)."""
    starts = Counter((x["run"], x["step"]) for x in ev.ledger if x["event"] == "start")
    fails = Counter((x["run"], x["step"]) for x in ev.ledger if x["event"] == "fail")
    return sum(max(0, n - fails[k] - 1) for k, n in starts.items())


def check_signals(ev: Evidence) -> Check:
    c = Check("every buffered or delivered signal was consumed exactly once")
    received: Counter[str] = Counter()
    for steps in ev.steps.values():
        for s in steps:
            if s.kind == "signal-wait" and s.status == "completed":  # not a request-wait
                received[json.dumps(s.output, sort_keys=True)] += 1
    runs, sent = _by_key(ev), set()
    for plan in ev.plans.values():
        if plan.workflow != "chaos-signals":
            continue
        run = runs.get(plan.key)
        complete = run is not None and run.status == "completed"
        for data in [d for _, d in plan.signals] + [{"own": plan.spec["topic"]}]:
            text = json.dumps(data, sort_keys=True)
            sent.add(text)
            n = received[text]
            c.expect(n == 1 if complete else n <= 1,
                     f"{plan.key} {run.run_id if run else '?'} ({run.status if run else '?'}): "
                     f"signal {text} consumed {n} times")  # fmt: skip
    for text, n in received.items():
        if text not in sent:
            c.expect(False, f"{n} waits received {text}, which nobody sent")
    return c


def check_requests(ev: Evidence) -> Check:
    c = Check("every request got exactly one answer, and the run replied to it once")
    runs = _by_key(ev)
    for plan in ev.plans.values():
        if plan.workflow != "chaos-requests":
            continue
        run = runs.get(plan.key)
        if run is None:
            continue
        replies = [s for s in ev.steps.get(run.run_id, []) if s.kind == "reply"]
        done = [s for s in replies if s.status == "completed"]
        where = f"{plan.key} {run.run_id} ({run.status})"
        c.expect(len(done) <= 2, f"{where}: {len(done)} replies recorded")
        expected = [{"n": n, "by": run.run_id} for n in (1, 2)][: len(plan.answers)]
        c.expect(plan.answers == expected, f"{where}: answers {plan.answers}")
        if run.status == "completed":
            c.expect(len(done) == 2 and len(plan.answers) == 2,
                     f"{where}: {len(done)} replies, {len(plan.answers)} answers")  # fmt: skip
    return c


def check_streams(ev: Evidence) -> Check:
    c = Check("a reader following a stream through the faults read each value once, in order")
    runs = _by_key(ev)
    for plan in ev.plans.values():
        if plan.workflow != "chaos-stream":
            continue
        run = runs.get(plan.key)
        if run is None:
            continue
        where = f"{plan.key} {run.run_id} ({run.status})"
        n = plan.spec["n"]
        written = [s for s in ev.steps.get(run.run_id, []) if s.kind == "stream"]
        offsets = sorted(s.output for s in written  # a close is a stream step without one
                         if s.status == "completed" and isinstance(s.output, int))  # fmt: skip
        c.expect(offsets == list(range(len(offsets))), f"{where}: offsets written {offsets}")
        # What the reader got is what the run wrote: a prefix of 0..n-1 (all of it once
        # the run completed), however often its reads were cut.
        c.expect(plan.read == list(range(len(plan.read))) and len(plan.read) == len(offsets),
                 f"{where}: read {plan.read}, {len(offsets)} written")  # fmt: skip
        if run.status == "completed":
            c.expect(len(plan.read) == n, f"{where}: {len(plan.read)} of {n} values read")
    return c


def check_compensations(ev: Evidence) -> Check:
    c = Check("compensations ran exactly once each for canceled/failed runs, never otherwise")
    undone = Counter((x["run"], x["step"]) for x in ev.ledger if x["event"] == "start")
    for run in ev.runs:
        steps = ev.steps.get(run.run_id, [])
        done = {s.step for s in steps if s.position >= 0 and s.status == "completed"}
        comps = Counter(s.step.removeprefix("compensate:") for s in steps
                        if s.position < 0 and s.status == "completed")  # fmt: skip
        owed = done & COMPENSABLE if run.status in ("canceled", "failed") else set()
        for step in sorted(owed | set(comps)):
            ran = undone[(run.run_id, f"compensate:{step}")]
            want = 1 if step in owed else 0
            c.expect(comps[step] == want and (ran >= 1) == (want == 1),
                     f"{run.workflow} {run.run_id} ({run.status}): undo of {step} recorded "
                     f"{comps[step]} times, its body ran {ran} times; expected {want}")  # fmt: skip
    return c


def check_children(ev: Evidence) -> Check:
    c = Check("children: at most one per call, each ended as designed when its parent completed")
    children: dict[str, list[Run]] = defaultdict(list)
    for run in ev.runs:
        if run.parent_run_id:
            children[run.parent_run_id].append(run)
    for parent in ev.runs:
        if parent.workflow != "chaos-children":
            continue
        kids = children.get(parent.run_id, [])
        modes = Counter(_mode(k) for k in kids)
        c.expect(all(n == 1 for n in modes.values()), f"{parent.run_id}: children {dict(modes)}")
        if parent.status != "completed":
            continue
        got = {_mode(k): k.status for k in kids}
        c.expect(got == CHILD_MODES, f"{parent.run_id} completed with children {got}")
    return c


def check_deploys(ev: Evidence) -> Check:
    c = Check("every run ran only on workers whose deploy has its workflow at its version")
    runs = {r.run_id: r for r in ev.runs}
    # Who recorded each step attempt, and who ran each body (one cut short leaves no record).
    ran = {(run_id, s.worker_id) for run_id, steps in ev.steps.items() for s in steps}
    ran |= {(line["run"], line["worker"]) for line in ev.ledger}
    for run_id, worker in sorted(ran, key=str):
        run, deploy = runs.get(run_id), ev.deploys.get(worker or "")
        if run is None or deploy is None:
            continue  # not a run of the engine's (check_lost), or not a worker of the soak
        c.expect(
            version_in(deploy, run.workflow) == run.version,
            f"{run.workflow}@{run.version} {run_id} ran on {worker} ({deploy} deploy)",
        )
    return c


def check_deaths(ev: Evidence) -> Check:
    c = Check("no worker process exited but by a fault (bodies raising SystemExit included)")
    c.expect(not ev.deaths, f"{len(ev.deaths)} exited on their own: {', '.join(ev.deaths)}")
    return c


def _mode(run: Run) -> str:
    mode = str((run.input or {}).get("mode", "?"))
    return {"ok": "ok", "fail": "bad", "slow": "slow"}.get(mode, mode)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def status_table(runs: Iterable[Run]) -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for run in runs:
        table[run.workflow][run.status] += 1
    return table


@dataclass
class Report:
    """What the soak did and what it found: counts, not adjectives."""

    header: str
    ev: Evidence
    checks: list[Check]
    facts: dict[str, Any]  # further counts: faults by kind, worker log lines, ...

    @property
    def ok(self) -> bool:
        return all(not c.violations for c in self.checks)

    def render(self) -> str:
        ev = self.ev
        top = [r for r in ev.runs if r.parent_run_id is None]
        statuses = Counter(r.status for r in ev.runs)
        lines = [self.header,
                 f"runs: {len(ev.plans)} started by the load generator, "
                 f"{len(ev.runs) - len(top)} children; "
                 + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))]  # fmt: skip
        for wf, counts in sorted(status_table(ev.runs).items()):
            detail = ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))
            lines.append(f"  {wf:<15} {sum(counts.values()):>5}  ({detail})")
        steps = sum(len(s) for s in ev.steps.values())
        lines.append(f"step attempts: {steps}; step body executions: "
                     f"{sum(1 for x in ev.ledger if x['event'] == 'start')} "
                     f"(re-executions after faults: {reruns(ev)}); "
                     f"business rows: {len(ev.effects)}")  # fmt: skip
        faults = Counter(f.kind for f in ev.faults)
        lines.append(
            f"faults injected: {len(ev.faults)} ("
            + ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))
            + ")"
        )
        for name, value in self.facts.items():
            lines.append(f"{name}: {value}")
        lines.append("invariants:")
        for c in self.checks:
            verdict = "PASS" if not c.violations else "FAIL"
            lines.append(f"  {verdict} {c.title}: {c.checked} checked, "
                         f"{len(c.violations)} violations")  # fmt: skip
            lines += [f"       - {v}" for v in c.violations[:EXAMPLES]]
            if len(c.violations) > EXAMPLES:
                lines.append(f"       ... and {len(c.violations) - EXAMPLES} more")
        bad = sum(len(c.violations) for c in self.checks)
        lines.append(f"RESULT: {'PASS' if self.ok else 'FAIL'} ({bad} violations)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "header": self.header, "facts": self.facts,
            "runs": {wf: dict(c) for wf, c in status_table(self.ev.runs).items()},
            "faults": dict(Counter(f.kind for f in self.ev.faults)),
            "checks": [{"title": c.title, "checked": c.checked, "violations": c.violations}
                       for c in self.checks],
        }  # fmt: skip
