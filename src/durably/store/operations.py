"""Operating runs, on the tables (§4.18): resume, fork, events, signal housekeeping,
retention. The client API over these is `_operating.OperatingApi`.

Every operation checks what it was given before it writes, in the transaction that writes:
an unknown run, a status that does not allow the operation or a position out of range is
refused with nothing written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..backends import Row
from ..core.codec import decode
from ..core.errors import InvalidInput, LeaseLostError, RunNotFound, SignalNotFound
from .history import History, Recorded
from .models import TERMINAL, Run
from .records import Lease, NewRun
from .store import Store

RESUMABLE = ("failed", "canceled")
PURGE_BATCH = 500


@dataclass(frozen=True)
class Signal:
    """A stored signal: buffered for the next waiter, or a record of one delivered."""

    id: int
    name: str
    data: Any
    created_at: datetime
    expires_at: datetime | None
    consumed_by: str | None
    buffered: bool
    delivered_to: list[str]

    def to_dict(self) -> dict[str, Any]:
        """`{"id", "name", "data", "created_at", "expires_at", "consumed_by"}`."""
        return {
            "id": self.id, "name": self.name, "data": self.data,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "consumed_by": self.consumed_by,
        }  # fmt: skip


class Operations:
    """The operators' side of the engine's tables."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db

    # ----------------------------------------------------------------- resume and fork

    async def resume(self, run_id: str) -> Run:
        async with self.db.transaction() as tx:
            rows = await tx.fetch("get_run_for_update", run_id=run_id)
            if not rows:
                raise RunNotFound(f"no run with id {run_id!r}")
            status = rows[0]["status"]
            if status not in RESUMABLE:
                raise InvalidInput(
                    f"run {run_id} is {status}: only a failed or canceled run can be resumed"
                )
            if rows[0]["compensating"]:
                raise InvalidInput(
                    f"run {run_id} is still running its compensations; resume it once "
                    "they have finished"
                )
            resumed = await tx.fetch("resume_run", run_id=run_id, channel=self.store.channel)
        self.db.notify_local("run")
        return Run.from_row(resumed[0])

    async def log_entries(self, run: Run) -> list[tuple[int, Recorded]]:
        """`run`'s log as its last workflow attempt saw it, with the record ids: every
        outcome the workflow received, in order (a step completed or failed for good, a
        sleep, a wait, a child, a signal sent, an event, a patch marker); never a retried
        attempt nor a compensation."""
        rows = await self.db.fetch("log_rows", run_id=run.run_id)
        ids = {(r["position"], r["attempt"]): r["id"] for r in rows}
        history = History(rows, max(run.attempts, 1), run.resumes)
        return [(ids[(r.position, r.attempt)], r) for r in history.log]

    async def fork_log(self, run: Run, from_position: int) -> list[int]:
        """The ids of the first `from_position` entries of `run`'s log: a prefix of what
        the workflow received, so the fork replays exactly (a caught failure included)."""
        log = await self.log_entries(run)
        if not 0 <= from_position <= len(log):
            listed = ", ".join(f"{n} {_entry(r)}" for n, (_, r) in enumerate(log[:20], 1))
            more = ", …" if len(log) > 20 else ""
            raise InvalidInput(
                f"cannot fork run {run.run_id} from position {from_position}: its log has "
                f"{len(log)} entries (use 0 to {len(log)}): {listed or 'none'}{more}"
            )
        return [step_id for step_id, _ in log[:from_position]]

    async def fork(self, run: Run, from_position: int, new: NewRun) -> Run:
        steps = await self.fork_log(run, from_position)
        async with self.db.transaction() as tx:
            created, _ = await self.store.insert_run(tx, new)
            for seq, step_id in enumerate(steps, start=1):
                if not await tx.fetch("copy_step", new_run_id=created.run_id, id=step_id,
                                      seq=seq):  # fmt: skip
                    # Purged since its log was read: a shorter history would run its
                    # steps again. Nothing of the fork is written.
                    raise RunNotFound(f"run {run.run_id} was purged while it was forked")
        self.db.notify_local("run")
        return created

    async def run_by_prefix(self, prefix: str) -> str:
        """The run id that `prefix` (8 or more characters) is the start of."""
        rows = await self.db.fetch("get_run", run_id=prefix)
        if rows:
            return prefix
        if len(prefix) < 8 or not prefix.replace("-", "").replace("_", "").isalnum():
            raise RunNotFound(f"no run with id {prefix!r} (a prefix needs 8 or more characters)")
        found = [r["id"] for r in await self.db.fetch("find_runs_by_prefix", prefix=prefix)]
        if not found:
            raise RunNotFound(f"no run with id or prefix {prefix!r}")
        if len(found) > 1:
            more = " …" if len(found) == 10 else ""
            raise InvalidInput(f"run id prefix {prefix!r} is ambiguous: {', '.join(found)}{more}")
        return str(found[0])

    # ----------------------------------------------------------------- events

    async def set_event(
        self, lease: Lease, position: int, attempt: int, key: str, seq: int, output: str
    ) -> None:
        rows = await self.db.fetch(
            "set_event", **lease.params(), position=position, attempt=attempt, step=key,
            seq=seq, output=output, channel=self.store.channel,
        )  # fmt: skip
        if not rows:
            raise LeaseLostError(f"lost the lease on run {lease.run_id}; event {key!r} not set")
        self.db.notify_local(f"event:{lease.run_id}")

    async def get_event(self, run_id: str, key: str) -> tuple[bool, Any]:
        """(whether the run has set `key`, its latest value)."""
        rows = await self.db.fetch("get_event", run_id=run_id, key=key)
        return (True, decode(rows[0]["output"])) if rows else (False, None)

    async def list_events(self, run_id: str) -> dict[str, Any]:
        rows = await self.db.fetch("list_events", run_id=run_id)
        return {r["key"]: decode(r["value"]) for r in rows}

    # ----------------------------------------------------------------- signals

    async def list_signals(self, name: str | None, pending: bool, limit: int) -> list[Signal]:
        rows = await self.db.fetch(
            "list_signals", namespace=self.store.namespace, name=name, pending=pending,
            limit=limit,
        )  # fmt: skip
        return [_signal(r) for r in rows]

    async def delete_signal(self, signal_id: int) -> None:
        rows = await self.db.fetch("delete_signal", namespace=self.store.namespace, id=signal_id)
        if not rows:
            raise SignalNotFound(f"no signal with id {signal_id}")

    # ----------------------------------------------------------------- retention

    async def purge(
        self, older_s: float, statuses: list[str], batch: int = PURGE_BATCH,
        workflow: str | None = None,
    ) -> dict[str, int]:  # fmt: skip
        """Delete finished runs (of `workflow`, if given) in batches of `batch`, one short
        transaction each."""
        done = {"runs": 0, "signals": 0}
        while True:
            async with self.db.transaction() as tx:
                picked = await tx.fetch(
                    "purge_pick", namespace=self.store.namespace, older_s=older_s,
                    statuses=statuses, batch=batch, workflow=workflow,
                )  # fmt: skip
                ids = [r["id"] for r in picked]
                if ids:
                    done["signals"] += len(await tx.fetch("purge_consumed", ids=ids))
                    done["signals"] += len(await tx.fetch("purge_addressed", ids=ids))
                    done["runs"] += len(await tx.fetch("purge_runs", ids=ids))
            if len(ids) < batch:
                break
        if set(statuses) == TERMINAL and workflow is None:  # signals no run will consume
            while True:
                gone = await self.db.fetch(
                    "purge_signals", namespace=self.store.namespace, older_s=older_s,
                    batch=batch,
                )  # fmt: skip
                done["signals"] += len(gone)
                if len(gone) < batch:
                    break
        return done

    async def take_maintenance(self, name: str, holder: str, every_s: float) -> bool:
        """Whether `holder` runs job `name` now (nobody else will for `every_s`)."""
        rows = await self.db.fetch("take_maintenance", name=name, holder=holder, every_s=every_s)
        return bool(rows)


def _entry(rec: Recorded) -> str:
    kind = "" if rec.kind == "function" else f"{rec.kind} "
    return f"{kind}{rec.step}" + ("" if rec.completed else " (failed)")


def _signal(r: Row) -> Signal:
    return Signal(
        id=r["id"], name=r["name"], data=decode(r["data"]), created_at=r["created_at"],
        expires_at=r["expires_at"], consumed_by=r["consumed_by"],
        buffered=bool(r["buffered"]), delivered_to=decode(r["delivered_to"]) or [],
    )  # fmt: skip
