"""`python -m bench latency --trace`: where a start → completed spends its time, hop by hop.

Seen from outside the engine, in the bench's own process (the worker runs there): while a
`Tracer` is installed, the PostgreSQL connector's transactions and statements, its LISTEN
connection's notifications and the event loop's new tasks are stamped with
`time.perf_counter()`, the clock the client's own stamps use. Nothing is patched without
`--trace`, and what is patched only records a time and a name before and after it calls
the original: the engine's behaviour, and its guarantees, are the same.

A sample's marks, in order, cut its span (the client's `start()` call to the poll that
sees it completed) into hops that sum to it by construction:

    start prep      the client's start() call to its transaction asked for (the input
                    encoded, the run's row made)
    start commit    the start's transaction: the pool's checkout, the insert, the commit
    notify          the start's commit to the NOTIFY handed to the worker's listener
    claim wait      the NOTIFY to the claim's statement asked for (a wake-up, a task)
    claim           the claim's checkout, query and commit
    step N body     the previous record's commit (or the claim's) to step N's record
                    asked for: replay, the body, the recorder's turn of the loop
    step N record   step N's record: checkout, statement, commit (group commit)
    end wait        the last record to the end asked for (the last step's body: its
                    record rides with the end)
    end commit      the run's end: checkout, statement, commit
    client wake-up  the end's commit to the client's poll that reads "completed"
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import AsyncConnectionPool

from durably.backends.postgres import transactions
from durably.backends.postgres.connector import PostgresConnector

now = time.perf_counter


@dataclass
class Call:
    """A transaction (or one autocommit statement) of the engine's, as the connector ran it."""

    asked: float  # the connector was asked for it (the pool's checkout begins)
    checked_out: float  # a connection in hand
    done: float = 0.0  # committed, its answer read
    names: list[str] = field(default_factory=list)


@dataclass
class Notice:
    at: float
    payload: str


class Tracer:
    """Stamps the connector's calls, its notifications and the loop's new tasks."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.notices: list[Notice] = []
        self.tasks: list[tuple[float, str]] = []  # when, and the coroutine's name
        self.checkouts: list[tuple[float, float]] = []
        self._undo: list[Callable[[], None]] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[Tracer]:
        self._patch_transaction()
        self._patch_fetch()
        self._patch_statements()
        self._patch_listen()
        self._patch_tasks()
        self._patch_checkouts()
        try:
            yield self
        finally:
            for undo in reversed(self._undo):
                undo()
            self._undo.clear()

    def _replace(self, owner: Any, name: str, new: Any) -> None:
        old = owner.__dict__[name]
        setattr(owner, name, new)
        self._undo.append(lambda: setattr(owner, name, old))

    def _patch_transaction(self) -> None:
        original = PostgresConnector.transaction
        calls = self.calls

        @contextlib.asynccontextmanager
        async def transaction(
            connector: Any, external: Any = None, *, pipelined: bool = True
        ) -> AsyncIterator[Any]:
            if external is not None:
                async with original(connector, external, pipelined=pipelined) as tx:
                    yield tx
                return
            asked = now()
            call: Call | None = None
            try:
                async with original(connector, external, pipelined=pipelined) as tx:
                    call = Call(asked, now())
                    setattr(tx, "_trace", call)  # noqa: B010 (read back by its statements)
                    yield tx
            finally:
                if call is not None:
                    call.done = now()
                    calls.append(call)

        self._replace(PostgresConnector, "transaction", transaction)

    def _patch_fetch(self) -> None:
        original = PostgresConnector.fetch
        calls = self.calls

        async def fetch(connector: Any, query: str, **params: Any) -> Any:
            call = Call(now(), now(), names=[query])
            try:
                return await original(connector, query, **params)
            finally:
                call.done = now()
                calls.append(call)

        self._replace(PostgresConnector, "fetch", fetch)

    def _patch_statements(self) -> None:
        for method in ("fetch", "send"):
            original = getattr(transactions.PgTx, method)

            def named(original: Any = original) -> Any:
                async def statement(tx: Any, query: str, **params: Any) -> Any:
                    call = getattr(tx, "_trace", None)
                    if call is not None:
                        call.names.append(query)
                    return await original(tx, query, **params)

                return statement

            self._replace(transactions.PgTx, method, named())

    def _patch_listen(self) -> None:
        original = PostgresConnector.listen
        notices = self.notices

        async def listen(connector: Any, on_message: Callable[[str], None]) -> Any:
            def heard(message: str) -> None:
                notices.append(Notice(now(), message))
                on_message(message)

            return await original(connector, heard)

        self._replace(PostgresConnector, "listen", listen)

    def _patch_tasks(self) -> None:
        loop = asyncio.get_running_loop()
        previous = loop.get_task_factory()
        tasks = self.tasks

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            tasks.append((now(), getattr(coro, "__qualname__", type(coro).__name__)))
            if previous is not None:
                return previous(loop, coro, **kwargs)
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(factory)
        self._undo.append(lambda: loop.set_task_factory(previous))

    def _patch_checkouts(self) -> None:
        original = AsyncConnectionPool.getconn
        checkouts = self.checkouts

        async def getconn(pool: Any, timeout: float | None = None) -> Any:
            asked = now()
            try:
                return await original(pool, timeout)
            finally:
                checkouts.append((asked, now()))

        self._replace(AsyncConnectionPool, "getconn", getconn)

    def reset(self) -> None:
        self.checkouts.clear()
        self.calls.clear()
        self.notices.clear()
        self.tasks.clear()


def _is_claim(call: Call) -> bool:
    return any(name.startswith("claim") for name in call.names)


def _is_record(call: Call) -> bool:
    return any(name.startswith("record") for name in call.names) and not _is_end(call)


def _is_end(call: Call) -> bool:
    return any(name.startswith(("finish", "complete", "end")) for name in call.names)


def breakdown(tracer: Tracer, t0: float, started: float, seen: float) -> dict[str, Any]:
    """One sample's hops (ms), from the client's marks and what the tracer saw between them.
    The marks that are missing (a hop the tracer did not see) leave their time in the hop
    after them, so that the hops still sum to the total."""
    calls = sorted((c for c in tracer.calls if t0 <= c.asked <= seen), key=lambda c: c.asked)
    # The start's commit as the connector saw it answered: the client's start() returns a
    # little later, and on the bench's one event loop the worker may act first.
    start = next((c for c in calls if c.asked <= started and "insert_run" in c.names), None)
    marks: list[tuple[str, float]] = [("start prep", start.asked)] if start else []
    marks.append(("start commit", start.done if start else started))
    notice = next((n for n in tracer.notices if n.at >= t0 and n.payload == "run"), None)
    started = marks[-1][1]
    claim = next((c for c in calls if _is_claim(c) and c.asked >= t0), None)
    if notice is not None and (claim is None or notice.at <= claim.asked):
        marks.append(("notify", max(notice.at, started)))
    if claim is not None:
        marks += [("claim wait", claim.asked), ("claim", claim.done)]
        after = claim.done
        records = [c for c in calls if _is_record(c) and c.asked >= after]
        for i, record in enumerate(records, 1):
            marks += [(f"step {i} body", record.asked), (f"step {i} record", record.done)]
        end = next((c for c in calls if _is_end(c) and c.asked >= after), None)
        if end is not None:
            marks += [("end wait", end.asked), ("end commit", end.done)]
    marks.append(("client wake-up", seen))
    hops: dict[str, float] = {}
    last = t0
    for name, at in marks:
        at = min(max(at, last), seen)  # a mark out of order gives its time to the next
        hops[name] = round((at - last) * 1000, 3)
        last = at
    return {
        "total_ms": round((seen - t0) * 1000, 3),
        "hops_ms": hops,
        "transactions": len(calls),
        "checkouts": sum(1 for a, _ in tracer.checkouts if t0 <= a <= seen),
        "checkout_ms": round(sum(b - a for a, b in tracer.checkouts if t0 <= a <= seen) * 1000, 3),
        "tasks": sum(1 for t, _ in tracer.tasks if t0 <= t <= seen),
        "task_names": [name for t, name in tracer.tasks if t0 <= t <= seen],
        "notices": sum(1 for n in tracer.notices if t0 <= n.at <= seen),
        "statements": [name for c in calls for name in c.names],
    }


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each hop over the samples (the machine is shared: one sample says
    little), with the hops in the order they happen."""
    order: list[str] = []
    for sample in samples:
        order += [hop for hop in sample["hops_ms"] if hop not in order]

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3) if values else 0.0

    return {
        "samples": len(samples),
        "total_ms": median([s["total_ms"] for s in samples]),
        "hops_ms": {hop: median([s["hops_ms"].get(hop, 0.0) for s in samples]) for hop in order},
        "transactions": median([s["transactions"] for s in samples]),
        "checkouts": median([s["checkouts"] for s in samples]),
        "checkout_ms": median([s["checkout_ms"] for s in samples]),
        "tasks": median([s["tasks"] for s in samples]),
        "notices": median([s["notices"] for s in samples]),
        "statements": samples[-1]["statements"] if samples else [],
        "task_names": samples[-1]["task_names"] if samples else [],
        "each": [{"total_ms": s["total_ms"], "hops_ms": s["hops_ms"]} for s in samples],
    }


def table(trace: dict[str, Any]) -> str:
    """The hops as lines for a person (stderr), the JSON line stays the last one printed."""
    lines = [f"median of {trace['samples']} samples, total {trace['total_ms']:.2f} ms"]
    for hop, ms in trace["hops_ms"].items():
        lines.append(f"  {hop:<16}{ms:8.3f} ms")
    lines.append(
        f"  per run: {trace['transactions']:g} transactions, {trace['checkouts']:g} pool"
        f" checkouts ({trace['checkout_ms']:.3f} ms), {trace['tasks']:g} tasks created,"
        f" {trace['notices']:g} notifications"
    )
    return "\n".join(lines)
