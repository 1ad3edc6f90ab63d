"""The soak's workflows and the load generator.

Every step body (and every compensation) notes each execution in the ledger (`ledger`);
`step.transaction` bodies write one row into the business table instead, inside the
engine's transaction.

The load generator keeps starting runs of a mixed workload, each from a `Plan` that says
what the run must end as. Every start carries an idempotency key, and so do half the
signals, so a call retried through a database outage is never doubled by the soak itself;
the other half are plain sends, looked for among the stored signals before they are sent
again (`_send`).

Configured by environment (workers and the soak alike): DURABLY_DATABASE_URL, WORKER_NAME,
CHAOS_LEDGER (the ledger directory), CHAOS_PLANT (a planted fault, see `PLANTS`),
CHAOS_DEPLOY (the deploy a worker process runs, see `DEPLOYS`; the soak itself is "new").
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from durably import (
    ChildWorkflowError,
    DatabaseUnavailable,
    Durably,
    NonRetryableError,
    RetryPolicy,
    RunTerminalError,
    StepContext,
    StepFailedError,
    WorkflowContext,
    WorkflowTimeoutError,
)

from .ledger import WORKER, note

app = Durably(os.environ.get("DURABLY_DATABASE_URL"))
PLANT = os.environ.get("CHAOS_PLANT", "")
PLANTS = {
    "double-signal": "the load generator delivers one buffered signal twice",
    "outside-tx": "a transaction body that rolls back once writes its row outside the transaction",
    "stream-reread": "a stream's reader, cut once, reads again from the start, not its offset",
}
# A rolling deploy: worker processes of the old deploy run beside those of the new one. The
# old deploy predates chaos-saga and has the previous version of chaos-signals; the load
# generator starts runs as the new deploy does. Every workflow not named is v1 in both.
DEPLOYS: dict[str, dict[str, str | None]] = {
    "new": {"chaos-signals": "v2"},
    "old": {"chaos-signals": "v1", "chaos-saga": None},
}
DEPLOY = os.environ.get("CHAOS_DEPLOY", "new")
ONCE = RetryPolicy(max_attempts=1)
QUICK = RetryPolicy(max_attempts=6, initial_interval="100ms", maximum_interval="1s")

# ------------------------------------------------------------------ step bodies


def work(ctx: StepContext, value: int, millis: int) -> int:
    """A sync body (runs in a thread) that takes `millis` and can be interrupted."""
    note(ctx, "start")
    deadline = time.monotonic() + millis / 1000
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.005)
    return value


async def awork(ctx: StepContext, value: int, millis: int) -> int:
    """An async body; with `millis` 0 it never yields to the event loop."""
    note(ctx, "start")
    if millis:
        await asyncio.sleep(millis / 1000)
    return value


def flaky(ctx: StepContext, failures: int, exits: bool = False) -> str:
    """Fails its first `failures` attempts; with `exits`, as argparse does (SystemExit),
    which must be retried by the same policy and never stop the worker."""
    note(ctx, "start")
    if ctx.attempt <= failures:
        note(ctx, "fail")  # a designed failure: not an extra execution
        if exits:
            raise SystemExit(2)
        raise RuntimeError(f"planned failure of attempt {ctx.attempt}")
    return "flaky-ok"


def doomed(ctx: StepContext, exits: bool = False) -> None:
    """Fails (run with `ONCE`: for good); with `exits`, by SystemExit."""
    note(ctx, "start")
    note(ctx, "fail")
    if exits:
        raise SystemExit("planned exit")
    raise NonRetryableError("planned failure")


def act(ctx: StepContext, what: str) -> str:
    note(ctx, "start")
    return what


def undo(ctx: StepContext, value: str) -> None:
    note(ctx, "start")


async def book(conn: Any, run_id: str, step: str, roll_back_once: bool) -> str:
    """A `step.transaction` body: one business row, in the engine's transaction.

    `roll_back_once` makes its first attempt fail after writing (a marker file, outside the
    database, remembers it did), so the rollback must take the row away again.
    """
    if isinstance(conn, sqlite3.Connection):
        conn.execute("INSERT INTO chaos_effects VALUES (?, ?)", (run_id, step))
    elif PLANT == "outside-tx" and roll_back_once:  # planted: a connection of its own
        async with await psycopg.AsyncConnection.connect(app.url, autocommit=True) as own:
            await own.execute("INSERT INTO chaos_biz.effects VALUES (%s, %s)", (run_id, step))
    else:
        await conn.execute("INSERT INTO chaos_biz.effects VALUES (%s, %s)", (run_id, step))
        await _hold_for_a_freeze(run_id)
    if roll_back_once:
        marker = Path(os.environ["CHAOS_LEDGER"]) / f"rolled-back-{run_id}-{step}"
        if not marker.exists():
            marker.touch()
            raise RuntimeError("planned rollback")
    return f"booked:{step}"


async def _hold_for_a_freeze(run_id: str) -> None:
    """The fault `sigstop-in-tx` asks (a file `hold-tx-<worker>`) that the next transaction
    body of this worker wait inside its transaction, its row written, for the worker to be
    frozen there: the body takes the request, says which run it holds (`inside-tx-<worker>`)
    and waits until the fault removes that file (or 20 s)."""
    folder = Path(os.environ["CHAOS_LEDGER"])
    try:
        (folder / f"hold-tx-{WORKER}").unlink()  # one body takes it
    except FileNotFoundError:
        return
    inside = folder / f"inside-tx-{WORKER}"
    (folder / f"{inside.name}.new").write_text(run_id)
    (folder / f"{inside.name}.new").rename(inside)
    until = time.monotonic() + 20
    while inside.exists() and time.monotonic() < until:
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------ workflows


def version_in(deploy: str, workflow: str) -> str | None:
    """The version of `workflow` that `deploy` registers (None: it has no such workflow)."""
    return DEPLOYS[deploy].get(workflow, "v1")


def deployed(name: str) -> Callable[[Callable[..., Any]], object]:
    """`app.workflow(name=name)` at this process's deploy's version; a workflow its deploy
    does not have stays a plain function, so its workers never claim its runs."""
    version = version_in(DEPLOY, name)
    return app.workflow(name=name, version=version) if version else lambda fn: fn


@app.workflow(name="chaos-steps")
async def steps_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Sequential steps, one retried until it succeeds, one failure caught."""
    out: list[Any] = []
    for i, (value, millis) in enumerate(spec["steps"]):
        out.append(await ctx.step.run(f"s{i}", work, value, millis))
    exits = bool(spec.get("exits"))  # its failures are SystemExit
    if spec["flaky"] is not None:
        out.append(await ctx.step.run("flaky", flaky, spec["flaky"], exits, retry=QUICK))
    if spec["caught"]:
        try:
            await ctx.step.run("doomed", doomed, exits, retry=ONCE)
        except StepFailedError:
            out.append("caught")
    return out


@app.workflow(name="chaos-gather")
async def gather_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Concurrent branches that each run several steps (and sleeps)."""

    async def branch(b: int, items: list[list[Any]]) -> list[Any]:
        out: list[Any] = []
        for j, (kind, value, millis) in enumerate(items):
            if kind == "z":
                await ctx.step.sleep(f"b{b}z{j}", f"{millis}ms")
                out.append(None)
            else:
                out.append(await ctx.step.run(f"b{b}s{j}", awork, value, millis))
        return out

    # A variable, not `return await ...`: the return type as context makes mypy pick
    # gather's overloads with Any (as it does for asyncio.gather).
    results = await ctx.gather(*(branch(b, items) for b, items in enumerate(spec["branches"])))
    return results


@deployed("chaos-signals")
async def signals_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Two signals on one topic (received in send order), then one sent to itself."""
    topic = spec["topic"]
    first = await ctx.step.wait_for_signal(topic, name="wait-1")
    await ctx.step.run("between", work, 0, 20)
    second = await ctx.step.wait_for_signal(topic, name="wait-2")
    own = f"{topic}:own"
    _, mine = await ctx.gather(
        ctx.step.send_signal(own, {"own": topic}, name="send-own"),
        ctx.step.wait_for_signal(own, name="wait-own"),
    )
    return [first, second, mine]


@app.workflow(name="chaos-requests")
async def requests_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Answer two requests (SPEC §4.22), with a step between taking each and replying."""
    answered = []
    for i in range(2):
        req = await ctx.step.wait_for_request("ask", timeout="10m")
        assert req is not None, "no request came in ten minutes"
        await ctx.step.run(f"think-{i}", work, 0, 20)
        await ctx.step.reply(req, {"n": req.data["n"], "by": ctx.run_id})
        answered.append(req.data["n"])
    return answered


@app.workflow(name="chaos-stream")
async def stream_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> int:
    """Write 0..n-1 to stream "s" (SPEC §4.21), a step between some, then close it."""
    for i in range(spec["n"]):
        if i in spec["pauses"]:
            await ctx.step.run(f"pause-{i}", work, i, spec["millis"])
        await ctx.step.write_stream("s", i)
    await ctx.step.close_stream("s")
    return int(spec["n"])


@app.workflow(name="chaos-child")
async def child_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> Any:
    if spec["mode"] == "slow":
        await ctx.step.sleep("slow", "60s")
    if spec["mode"] == "fail":
        await ctx.step.run("child-doomed", doomed, retry=ONCE)
    return await ctx.step.run("child-step", work, spec["value"], 0)


@app.workflow(name="chaos-children")
async def children_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """Three children started at once: one completes, one fails, one times out."""
    ok = ctx.step.start_workflow(child_wf, {"mode": "ok", "value": spec["value"]}, name="ok")
    bad = ctx.step.start_workflow(child_wf, {"mode": "fail", "value": ""}, name="bad")
    slow = ctx.step.start_workflow(
        child_wf, {"mode": "slow", "value": ""}, name="slow", timeout=f"{spec['timeout_ms']}ms"
    )
    out = [await ok]
    try:
        await bad
        out.append("no error")
    except ChildWorkflowError:
        out.append("child failed")
    try:
        await slow
        out.append("no timeout")
    except WorkflowTimeoutError:
        out.append("timed out")
    return out


@app.workflow(name="chaos-ledger")
async def ledger_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> list[Any]:
    """`step.transaction` writes to the business table, between ordinary steps."""
    out: list[Any] = []
    for i in range(spec["n"]):
        rollback = i == spec["roll_back_once"]
        out.append(await ctx.step.transaction(f"t{i}", book, ctx.run_id, f"t{i}", rollback,
                                              retry=QUICK))  # fmt: skip
        out.append(await ctx.step.run(f"w{i}", work, i, 10))
    return out


@deployed("chaos-saga")
async def saga_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> str:
    """Two compensable steps, then: fail for good, hold (to be canceled), or ship."""
    await ctx.step.run("reserve", act, "reserve", compensate=undo)
    await ctx.step.run("charge", act, "charge", compensate=undo)
    if spec["end"] == "fail":
        await ctx.step.run("ship", doomed, bool(spec.get("exits")), retry=ONCE)
    if spec["end"] == "hold":
        await ctx.step.sleep("hold", f"{spec['hold_ms']}ms")
    return str(await ctx.step.run("ship", act, "shipped"))


@app.workflow(name="chaos-deadline")
async def deadline_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> str:
    """A compensable step, then a sleep far past the run's deadline."""
    await ctx.step.run("prepare", act, "prepare", compensate=undo)
    await ctx.step.sleep("too-long", "60s")
    return str(await ctx.step.run("never", act, "never"))


@app.workflow(name="chaos-chain")
async def chain_wf(ctx: WorkflowContext, spec: dict[str, Any]) -> int:
    """Continue-as-new (SPEC §4.23): generation `gen` runs one step and continues as the
    next, the last returns the sum of every generation's value."""
    got: int = await ctx.step.run("generation", work, spec["values"][spec["gen"]], spec["millis"])
    total = int(spec["total"]) + got
    if spec["gen"] < len(spec["values"]) - 1:
        ctx.continue_as_new({**spec, "gen": spec["gen"] + 1, "total": total})
    return total


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


# ------------------------------------------------------------------ the load generator


class LoadGenerator:
    """Keeps starting runs from random plans, sends their signals, cancels some.

    Args:
        client: the app the calls go through.
        rng: the soak's random source (the seed makes the plans reproducible).
        in_flight: the most runs not yet finished at once.
        rate: the most starts a second.
        plant: a planted fault (`PLANTS`), or "".
    """

    def __init__(
        self, client: Durably, rng: random.Random, in_flight: int, rate: float, plant: str = ""
    ) -> None:
        self.client = client
        self.rng = rng
        self.in_flight = in_flight
        self.rate = rate
        self.plant = plant
        self.plans: dict[str, Plan] = {}
        self.retried = 0  # client calls retried through an outage
        self._tasks: set[asyncio.Task[None]] = set()
        self._planted = False

    async def run(self, stop: asyncio.Event) -> None:
        """Start runs until `stop` is set."""
        while not stop.is_set():
            if len(self._tasks) >= self.in_flight:
                await asyncio.sleep(0.05)
                continue
            plan = make_plan(self.rng, len(self.plans))
            self.plans[plan.key] = plan
            task = asyncio.create_task(self._drive(plan), name=f"drive-{plan.key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            await asyncio.sleep(1 / self.rate)

    async def drain(self, timeout: float) -> int:
        """Wait for every started run to finish; the number still unfinished at `timeout`."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        left = list(self._tasks)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        return len(left)

    async def _retry(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """`await call(*args, **kwargs)`, again while the database is unavailable."""
        outage = _Outage(self)
        while True:
            try:
                return await call(*args, **kwargs)
            except DatabaseUnavailable as exc:
                await outage.pause(exc)

    async def _drive(self, plan: Plan) -> None:
        try:
            await self._drive_plan(plan)
        except Exception as exc:  # reported as a violation, the soak goes on
            plan.driver_error = f"{type(exc).__name__}: {exc}"

    async def _drive_plan(self, plan: Plan) -> None:
        app_ = self.client
        if plan.signals:  # the first signal is sent before the run starts: buffered
            key, data = plan.signals[0]
            plan.sent.append(await self._send(data, key))
            if (self.plant == "double-signal" and not self._planted and key is not None
                    and plan.cancel_after is None):  # fmt: skip
                self._planted = True  # planted: the same signal delivered a second time
                await self._send(data, f"{key}+")
        deadline = None
        if plan.deadline_s is not None:
            deadline = datetime.now(UTC) + timedelta(seconds=plan.deadline_s)
        wf = app_.get_workflow(plan.workflow)
        handle = await self._retry(wf.start, plan.spec, idempotency_key=plan.key,
                                   deadline_at=deadline)  # fmt: skip
        plan.run_id = handle.run_id
        began = time.monotonic()
        if len(plan.signals) > 1:
            if plan.signal_after_wait:  # the second one reaches a waiting run
                await self._until(plan, lambda status: status != "pending" and status != "running")
            key, data = plan.signals[1]
            plan.sent.append(await self._send(data, key))
        if plan.workflow == "chaos-requests":
            await self._ask(plan, began)
        elif plan.workflow == "chaos-stream":
            await self._follow(plan, began)
        elif plan.cancel_after is not None:
            await asyncio.sleep(max(0.0, began + plan.cancel_after - time.monotonic()))
            await self._cancel(plan)
        await self._until(plan, None)

    async def _ask(self, plan: Plan, began: float) -> None:
        """Two requests, each asked again through an outage or a timeout with its key (the
        key delivers it once and returns its one answer); a cancel races them."""
        assert plan.run_id is not None
        canceling = None
        if plan.cancel_after is not None:
            canceling = asyncio.create_task(self._cancel_at(plan, began))
        try:
            for n in (1, 2):
                while True:
                    try:
                        plan.answers.append(await self._retry(
                            self.client.request, plan.run_id, "ask", {"n": n},
                            idempotency_key=f"{plan.key}:r{n}", timeout="20s",
                        ))  # fmt: skip
                        break
                    except WorkflowTimeoutError:
                        continue
        except RunTerminalError:
            pass  # canceled (or ended by its deadline) before it answered
        finally:
            if canceling is not None:
                await canceling

    async def _follow(self, plan: Plan, began: float) -> None:
        """Read the run's stream to its close, from where the last read stopped whenever
        the database goes away (a reader loses nothing and sees each value once); a cancel
        races it (the run's end closes the stream)."""
        assert plan.run_id is not None
        canceling = None
        if plan.cancel_after is not None:
            canceling = asyncio.create_task(self._cancel_at(plan, began))
        outage = _Outage(self)
        try:
            while True:
                offset = len(plan.read)
                if self.plant == "stream-reread" and not self._planted and offset:
                    self._planted, offset = True, 0  # planted: it lost its place
                try:
                    async for value in self.client.read_stream(plan.run_id, "s", offset):
                        plan.read.append(value)
                        if self.plant == "stream-reread" and not self._planted:
                            break  # planted: cut after the first value
                    else:
                        return
                except DatabaseUnavailable as exc:
                    await outage.pause(exc)
        finally:
            if canceling is not None:
                await canceling

    async def _cancel_at(self, plan: Plan, began: float) -> None:
        assert plan.cancel_after is not None
        await asyncio.sleep(max(0.0, began + plan.cancel_after - time.monotonic()))
        await self._cancel(plan)

    async def _send(self, data: dict[str, Any], key: str | None) -> dict[str, Any]:
        """Send once. A keyed send is simply sent again through an outage (the key makes it
        once); a plain one whose reply was lost may have been stored: it is looked for
        among the topic's signals before it is sent again, as a careful client would."""
        topic = data["topic"]
        if key is not None:
            sent: dict[str, Any] = await self._retry(
                self.client.send_signal, topic, data, idempotency_key=key
            )
            return sent
        outage = _Outage(self)  # one give-up for the sends and the look-ups
        maybe_sent = False  # a send failed: it may have been stored all the same
        while True:
            try:
                if maybe_sent:
                    stored = await self.client.list_signals(topic, pending=False)
                    if any(s["data"] == data for s in stored):
                        return {"delivered_to": [], "buffered": False, "duplicate": False,
                                "found": True}  # fmt: skip
                sent = await self.client.send_signal(topic, data)
                return sent
            except DatabaseUnavailable as exc:
                maybe_sent = True
                await outage.pause(exc)

    async def _until(self, plan: Plan, status_ok: Any) -> None:
        """Poll the run until `status_ok(status)` (None: until it is done)."""
        assert plan.run_id is not None
        while True:
            try:
                run = await self.client.get_run(plan.run_id)
                if run.done or (status_ok is not None and status_ok(run.status)):
                    return
            except DatabaseUnavailable:
                self.retried += 1
            await asyncio.sleep(0.5 if status_ok else 1.0)

    async def _cancel(self, plan: Plan) -> None:
        assert plan.run_id is not None
        doubt = False  # a cancel whose reply was lost may have canceled the run
        while True:
            try:
                await self.client.cancel(plan.run_id)
                plan.cancel, plan.canceled_at = "canceled", time.time()
                return
            except RunTerminalError:
                plan.cancel = "uncertain" if doubt else "refused"
                return
            except DatabaseUnavailable:
                doubt = True
                self.retried += 1
                await asyncio.sleep(0.5)


class _Outage:
    """Pauses between tries of one call through a database outage, 0.2 s doubling to 2 s,
    each counted as a retried call; the error again once 180 s have passed."""

    def __init__(self, load: LoadGenerator) -> None:
        self._load = load
        self._pause = 0.2
        self._give_up = time.monotonic() + 180

    async def pause(self, error: DatabaseUnavailable) -> None:
        if time.monotonic() > self._give_up:
            raise error
        self._load.retried += 1
        await asyncio.sleep(self._pause)
        self._pause = min(self._pause * 2, 2.0)
