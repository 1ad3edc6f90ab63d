"""The engine's operations on runs, over either dialect's named queries: a run started,
read, listed, canceled; claimed, renewed, parked, held or let go by a worker.

What else is written about a run is the concern of a collaborator the store holds, each
over the same connector: `steps` (its step records), `sends` (signals sent and taken),
`givebacks` (a signal a wait held, handed back), `ends` (its end, or a retry's) and
`debounces` (a debounced start, which joins its window's run or opens one).
`attributes` (its search attributes, merged by its code).

Everything that writes on behalf of a worker is fenced: it carries a `Lease` and commits
only while that lease is live (see the header of each `queries.sql`). Everything that
clients call (start, cancel, a signal's send) may run inside the caller's own
transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from ..backends import Connector, Row, Sent, Tx
from ..core.codec import canonical, decode, encode
from ..core.errors import IdempotencyConflictError, LeaseLostError, RunNotFound, RunTerminalError
from ..core.sealing import Codec
from .admission import Admission, admits
from .attributes import RunAttributes
from .continues import RunContinues
from .debounces import Debounces
from .ends import RunEnds
from .giveback import GiveBacks
from .models import TERMINAL, Run, StepAttempt
from .records import Lease, NewRun
from .requests import Requests
from .sealed import SealedConnector
from .sends import Sends
from .steps import StepRecords


class Store:
    """durably's tables, as operations on runs; the rest of what is written about a run is
    its collaborators' (`steps`, `sends`, `givebacks`, `ends`)."""

    def __init__(self, connector: Connector, namespace: str, codec: Codec | None = None) -> None:
        # Payloads at rest: sealed with `codec` where they are encoded, opened here, as
        # every row is read (see `sealed`).
        self.codec = codec
        self.db = connector = SealedConnector(connector, codec)
        self.namespace = namespace
        self.channel = f"durably_{connector.schema}"
        self.steps = StepRecords(connector, codec)
        self.sends = Sends(connector, namespace, self.channel, self.steps)
        self.givebacks = GiveBacks(connector, self.sends)
        self.requests = Requests(connector, self.channel, self.sends)
        self.ends = RunEnds(connector, self.channel, codec)
        self.continues = RunContinues(connector, self.channel, self.ends)
        self.debounces = Debounces(connector)
        self.admission = Admission(self.channel)
        self.attributes = RunAttributes(connector)

    # ----------------------------------------------------------------- client side

    async def create_run(self, new: NewRun, external: Any = None) -> tuple[Run, bool]:
        """Insert a run, or return the one its idempotency key already names (or the
        pending run of its debounce window, updated: see `debounces`). A debounced start
        joins or opens its window without a per-key admission: its run waits for a slot
        when claimed, as any queued run does."""
        if new.debounce is not None:
            run, created = await self.debounces.start(
                self._insert_params(new), new.debounce, external
            )
            if created:
                self.db.notify_local("run")
            return run, created
        if admits(new):  # a transaction of its own: the start is admitted on its key
            return await self._create_admitted(new, external)
        rows = (
            []
            if external is not None
            else await self.db.fetch("insert_run", **self._insert_params(new))
        )  # one round trip when it is new; else the transaction below reads what is there
        if rows:
            run, created = Run.from_row(rows[0]), True
        else:
            async with self.db.transaction(external) as tx:
                run, created = await self.insert_run(tx, new)
        if created and (run.available_at is None or run.status == "pending"):
            self.db.notify_local("run")
        return run, created

    async def _create_admitted(self, new: NewRun, external: Any) -> tuple[Run, bool]:
        # An admission may cancel other runs' trees, in an order a run's end may cross:
        # aborted, the start is run again (in the caller's transaction, it is theirs).
        async def attempt() -> tuple[Run, bool, list[Sent]]:
            canceled: list[Sent] = []
            async with self.db.transaction(external) as tx:
                run, created = await self.insert_run(tx, new, canceled)
            return run, created, canceled

        if external is not None:
            run, created, canceled = await attempt()
        else:
            run, created, canceled = await self.db.retrying(attempt, "start")
        for sent in canceled:
            for row in await sent.rows():
                self.db.notify_local(f"cancel:{row['id']}")
        if created:
            self.db.notify_local("run")
        return run, created

    async def insert_run(
        self, tx: Tx, new: NewRun, canceled: list[Sent] | None = None
    ) -> tuple[Run, bool]:
        """Insert a run in `tx` (admitted on its key, see `admission`; the cancels that
        sends are added to `canceled`), or return the one its key already names."""
        params = self._insert_params(new)
        if admits(new):
            rows, others = await self.admission.insert(tx, new, params)
            if rows:
                run, gone = await self.admission.admit(tx, Run.from_row(rows[0]), new, others)
                if canceled is not None:
                    canceled.extend(gone)
                return run, True
        else:
            rows = await tx.fetch("insert_run", **params)
            if rows:
                return Run.from_row(rows[0]), True
        if new.idempotency_key is None:
            # Only a fixed child id can collide: the child was started before.
            existing = await tx.fetch("get_run", run_id=new.run_id)
            return Run.from_row(existing[0]), False
        existing = await tx.fetch(
            "get_run_by_key",
            namespace=self.namespace,
            workflow=new.workflow,
            idempotency_key=new.idempotency_key,
        )
        run = Run.from_row(existing[0])
        # The key of a chain of runs that continued as new is its newest run's (see
        # store/continues.py); the input it is compared with, the chain's first run's.
        started = run.input
        if existing[0].get("chain_root"):
            root = await tx.fetch("get_run", run_id=existing[0]["chain_root"])
            started = decode(root[0]["input"]) if root else decode(new.input_json)  # purged
        # Equal inputs are equal whatever their keys' order (canonical JSON, SPEC §4.20).
        if canonical(started) != canonical(decode(new.input_json)):
            raise IdempotencyConflictError(
                f"idempotency key {new.idempotency_key!r} already started run {run.run_id} "
                f"of {new.workflow!r} with a different input; use another key"
            )
        return run, False

    def _insert_params(self, new: NewRun) -> dict[str, Any]:
        return dict(
            id=new.run_id or uuid.uuid4().hex, namespace=self.namespace,
            workflow=new.workflow, version=new.version, input=new.input_json,
            idempotency_key=new.idempotency_key, max_attempts=new.max_attempts,
            available_at=new.available_at, deadline_at=new.deadline_at,
            parent_run_id=new.parent_run_id, trace_context=new.trace_context,
            parent_close=new.parent_close, queue=new.queue,
            concurrency_key=new.concurrency_key, priority=new.priority, channel=self.channel,
            attributes=new.attributes_json,
        )  # fmt: skip

    async def get_run(self, run_id: str) -> Run:
        rows = await self.db.fetch("get_run", run_id=run_id)
        if not rows:
            raise RunNotFound(f"no run with id {run_id!r}")
        return Run.from_row(rows[0])

    async def list_runs(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        due_before: datetime | None = None,
        offset: int = 0,
        created_after: datetime | None = None,
        queue: str | None = None,
        idempotency_key: str | None = None,
        namespace: str | None = None,
        attributes_json: str | None = None,
    ) -> list[Run]:
        """Runs, newest first, of every namespace unless `namespace` is given; with
        `attributes_json` (a JSON object, `core.attributes`), those whose search attributes
        hold each of its keys with an equal value."""
        # SQLite reads matching runs from its attribute table (a query of their own);
        # PostgreSQL's list_runs is planned with the filter, for its GIN index.
        by_table = attributes_json is not None and self.db.dialect == "sqlite"
        query = "list_runs_by_attributes" if by_table else "list_runs"
        rows = await self.db.fetch(
            query, status=status, workflow=workflow, limit=limit, due_before=due_before,
            offset=offset, created_after=created_after, queue=queue,
            idempotency_key=idempotency_key, namespace=namespace, attributes=attributes_json,
        )  # fmt: skip
        return [Run.from_row(r) for r in rows]

    async def list_stuck(self, limit: int, grace_s: float, alive_s: float) -> list[Run]:
        rows = await self.db.fetch("list_stuck", limit=limit, grace_s=grace_s, alive_s=alive_s)
        return [Run.from_row(r) for r in rows]

    async def list_tables(self) -> list[str]:
        rows = await self.db.fetch("list_tables", schema=self.db.schema)
        return [r["name"] for r in rows]

    async def metrics(self) -> list[Row]:
        """(metric, label, value) rows for /metrics."""
        return await self.db.fetch("metrics")

    async def list_steps(self, run_id: str) -> list[StepAttempt]:
        await self.get_run(run_id)
        rows = await self.db.fetch("list_steps", run_id=run_id)
        return [StepAttempt.from_row(r) for r in rows]

    async def cancel(self, run_id: str, error: dict[str, Any]) -> Run:
        # A cancel locks a whole tree; a run of it ending, or a record of it being written,
        # may lock the same rows in another order: aborted, it is run again.
        # A run that continued as new: the cancel follows its chain to the live run.
        while True:
            done = await self.db.retrying(partial(self._cancel, run_id, error), "cancel")
            if isinstance(done, Run):
                return done
            run_id = done

    async def _cancel(self, run_id: str, error: dict[str, Any]) -> Run | str:
        async with self.db.transaction() as tx:
            # The whole tree is locked first, in id order (see `lock_tree`): a cancel and
            # the end of a run of the tree never deadlock.
            root = [r for r in await tx.fetch("lock_tree", run_id=run_id) if r["id"] == run_id]
            if not root:
                raise RunNotFound(f"no run with id {run_id!r}")
            if root[0]["status"] == "continued":
                [row] = await tx.fetch("get_run", run_id=run_id)
                continued_as: str = decode(row["output"])["continued_as"]
                return continued_as
            if root[0]["status"] in TERMINAL:
                raise RunTerminalError(run_id, root[0]["status"], "cancel")
            canceled = await tx.fetch(
                "cancel_tree", run_id=run_id, error=encode(error, "error"),
                channel=self.channel, token=uuid.uuid4().hex,
            )  # fmt: skip
        for row in canceled:
            self.db.notify_local(f"cancel:{row['id']}")
        self.db.notify_local("run")
        return await self.get_run(run_id)

    # ----------------------------------------------------------------- worker side

    async def claim(
        self, worker_id: str, pairs: Sequence[tuple[str, str]], limit: int, lease_s: float,
        held: Sequence[str] = (), binds: Sequence[tuple[str, int]] | None = None,
    ) -> list[Row]:  # fmt: skip
        """Claim up to `limit` due runs of `pairs` in this store's namespace (unqueued, or
        of a queue no worker declares), none of `held` (runs the worker still executes).
        `binds`, one per pair: the version and `max_attempts` its claim writes on a run a
        thin client started (`records.NEWEST`; default: the pair's version, 1 attempt).
        On PostgreSQL the claim may not be durable yet: see `confirm_claims`."""
        binds = binds if binds is not None else [(p[1], 1) for p in pairs]
        return await self.db.fetch(
            "claim",
            namespace=self.namespace,
            worker_id=worker_id,
            workflows=[p[0] for p in pairs],
            versions=[p[1] for p in pairs],
            binds=[b[0] for b in binds],
            max_attempts=[b[1] for b in binds],
            limit=limit,
            lease=lease_s,
            token=uuid.uuid4().hex,
            held=list(held),
        )

    async def confirm_claims(
        self, worker_id: str, fences: dict[str, int], lease_s: float
    ) -> set[str]:
        """Make the claims of `fences` (run id -> fence) durable; the ids still held.

        A PostgreSQL claim commits without waiting for its WAL flush (see `claim`): a
        heartbeat of its runs does, and its flush takes the claim's WAL with it (a statement
        that writes nothing would commit without a flush). A claim a crash lost is not
        found, nor one the lease was lost since. SQLite's claim is durable as it commits."""
        if self.db.dialect == "sqlite":
            return set(fences)
        rows = await self.db.fetch(
            "confirm_claims", worker_id=worker_id, ids=list(fences),
            fences=list(fences.values()), lease=lease_s,
        )  # fmt: skip
        return {row["id"] for row in rows}

    async def next_due(self, pairs: Sequence[tuple[str, str]]) -> tuple[datetime | None, datetime]:
        rows = await self.db.fetch(
            "next_due", namespace=self.namespace, workflows=[p[0] for p in pairs],
            versions=[p[1] for p in pairs],
        )  # fmt: skip
        return rows[0]["next_at"], rows[0]["db_now"]

    async def heartbeat(
        self, worker_id: str, held: dict[str, int], lease_s: float
    ) -> dict[str, Row]:
        """Renew every lease in `held`; for each run whose lease still holds, its `status`
        and whether something asked to wake it (`wake_requested`)."""
        rows = await self.db.fetch(
            "heartbeat", worker_id=worker_id, ids=list(held), fences=list(held.values()),
            lease=lease_s,
        )  # fmt: skip
        return {r["id"]: r for r in rows}

    async def worker_seen(
        self, worker_id: str, pairs: list[tuple[str, str]], concurrency: int
    ) -> None:
        await self.db.fetch(
            "worker_seen", worker_id=worker_id, concurrency=concurrency,
            workflows_json=encode([list(p) for p in pairs], "workflows"),
        )  # fmt: skip

    async def worker_gone(self, worker_id: str) -> None:
        await self.db.fetch("worker_gone", worker_id=worker_id)

    async def check_held(self, worker_id: str, held: dict[str, int]) -> dict[str, Row]:
        """Of the runs in `held`, those this worker still owns (without renewing), with
        their `status` and `wake_requested`."""
        rows = await self.db.fetch(
            "check_held", worker_id=worker_id, ids=list(held), fences=list(held.values())
        )
        return {r["id"]: r for r in rows}

    async def start_child(
        self, lease: Lease, position: int, attempt: int, step: str, new: NewRun,
        timeout_s: float | None,
    ) -> tuple[datetime | None, bool]:  # fmt: skip
        """Start a child run and record the parent's wait for it; (the wait's timeout,
        whether the child is new: an existing one may have ended already)."""
        async with self.db.transaction() as tx:
            await self.steps.check_lease(tx, lease)
            _, created = await self.insert_run(tx, new)
            wake_at = await self.steps.record_start(
                lease, position, attempt, step, "child", tx=tx, child_run_id=new.run_id,
                wait_s=timeout_s,
            )  # fmt: skip
        self.db.notify_local("run")
        return wake_at, created

    async def park(
        self, lease: Lease, status: str, wake_at: datetime | None, waiting_for: str | None,
        children: Sequence[str] = (), error: dict[str, Any] | None = None,
    ) -> datetime | None:  # fmt: skip
        """Park the run (`status`: waiting, or pending for a retry's back-off) until
        `wake_at`, a signal, or the end or cancel of one of `children` (those its code
        awaits: the end of another is read by the claim that awaits it)."""
        rows = await self.db.fetch(
            "park", **lease.params(), status=status, wake_at=wake_at, waiting_for=waiting_for,
            parked_on=list(children),
            error=encode(error, "error", codec=self.codec) if error else None,
        )  # fmt: skip
        if not rows:
            raise LeaseLostError(f"lost the lease on run {lease.run_id} while parking it")
        return rows[0]["available_at"]  # type: ignore[no-any-return]

    async def hold(self, lease: Lease, error: dict[str, Any], delay_s: float) -> datetime:
        """Let go of a run whose replay did not match its history (SPEC §4.2): `held`
        with `error`, claimable again in `delay_s` (a canceled run stays canceled)."""
        rows = await self.db.fetch(
            "hold_run",
            **lease.params(),
            error=encode(error, "error", codec=self.codec),
            delay_s=delay_s,
        )
        if not rows:
            raise LeaseLostError(f"lost the lease on run {lease.run_id} while holding it")
        return rows[0]["available_at"]  # type: ignore[no-any-return]

    async def release(self, lease: Lease) -> None:
        await self.db.fetch("release", **lease.params())
        self.db.notify_local("run")
