"""A run's step records, written under its worker's lease: an attempt begun
(`record_start`) or ended (`record_finish`, in the caller's transaction), the attempts of
several runs in one statement (`record_many`, the group commit's), and a
`step.transaction`'s body with its record in one transaction (`transact`).

Each write is fenced: it commits only while the lease is live, else LeaseLostError with
nothing written (see the header of each `queries.sql`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..backends import Connector, Row, Tx
from ..core.errors import DatabaseUnavailable, LeaseLostError, user_failure
from ..core.sealing import Codec
from .records import Lease, PendingStep


class _BodyFailed(Exception):
    """Carries a `step.transaction` body's own error past the connector, which would
    take a database error for the engine's (its retry policy decides, not the lease)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class StepRecords:
    """The step attempts of runs, over the connector."""

    def __init__(self, connector: Connector, codec: Codec | None = None) -> None:
        self.db = connector
        self.codec = codec  # the app's: errors are sealed with it

    async def record_start(
        self,
        lease: Lease,
        position: int,
        attempt: int,
        step: str,
        kind: str,
        *,
        tx: Tx | None = None,
        signal: str | None = None,
        child_run_id: str | None = None,
        wait_s: float | None = None,
    ) -> datetime | None:
        """Record an attempt as running; for waits, the wake time (now + wait_s, DB clock)."""
        params = dict(
            lease.params(), position=position, attempt=attempt, step=step, kind=kind,
            signal=signal, child_run_id=child_run_id, wait_s=wait_s,
        )  # fmt: skip
        rows = await (tx.fetch if tx else self.db.fetch)("record_start", **params)
        if not rows:
            raise LeaseLostError(f"lost the lease on run {lease.run_id} before step {step!r}")
        wake_at: datetime | None = rows[0]["wake_at"]
        return wake_at

    async def record_finish(self, lease: Lease, step: PendingStep, tx: Tx) -> None:
        """Record an attempt's end in `tx`; LeaseLostError (nothing written) without a live
        lease, or if the attempt was already recorded completed."""
        rows = await tx.fetch("record_finish", **lease.params(), **step.params(self.codec))
        if not rows:
            raise LeaseLostError(
                f"lost the lease on run {lease.run_id}; the result of step {step.name!r} was "
                "not recorded and another worker will run it"
            )

    async def record_many(
        self, worker_id: str, items: list[tuple[Lease, PendingStep]]
    ) -> dict[tuple[str, int, int], str]:
        """Record step attempts of several runs in one statement, each under its own
        lease; the (run, position, attempt) keys that were written, with their run's
        status (a canceled run's worker may have missed the news)."""
        batch = "[" + ",".join(step.batch_entry(lease, self.codec) for lease, step in items) + "]"
        rows = await self.db.fetch("record_many", worker_id=worker_id, batch=batch)
        return {(r["run_id"], r["position"], r["attempt"]): r["run_status"] for r in rows}

    async def check_lease(
        self, tx: Tx, lease: Lease, query: str = "check_lease", **params: Any
    ) -> datetime:
        rows = await tx.fetch(query, **lease.params(), **params)
        if not rows:
            raise LeaseLostError(f"lost the lease on run {lease.run_id}; nothing was committed")
        return rows[0]["db_now"]  # type: ignore[no-any-return]

    async def get_attempt(self, run_id: str, position: int, attempt: int) -> Row | None:
        rows = await self.db.fetch("get_attempt", run_id=run_id, position=position, attempt=attempt)
        return rows[0] if rows else None

    async def transact(
        self, lease: Lease, lease_s: float, position: int, attempt: int, step: str,
        seq: int | None, fn: Any, args: tuple[Any, ...], encode_result: Any,
        compensable: bool = False,
    ) -> str:  # fmt: skip
        """`fn(conn, *args)`, the lease check and the step's record in one transaction;
        the recorded output. (A transaction's undo is one too, at the undo's position,
        with no `seq`: compensations are not entries of the run's log.)

        The run is not locked while `fn` runs (`body_lease`): the record at the end checks
        the fence again, and the transaction (idle for `lease_s`) ends on the server.
        If the connection fails at COMMIT, the transaction may have committed without
        telling us: the record (same run, position and attempt) says which.
        """
        output: str | None = None
        try:
            async with self.db.transaction(pipelined=False) as tx:  # the body's connection
                await self.check_lease(
                    tx, lease, "body_lease", idle_ms=max(1, round(lease_s * 1000))
                )
                try:
                    result = await tx.call(fn, *args)
                except BaseException as exc:  # the body's own error, even a database one
                    failure = user_failure(exc)  # even SystemExit; not a cancellation
                    if isinstance(failure, Exception):
                        raise _BodyFailed(failure) from exc
                    raise
                output = encode_result(result)
                await self.record_finish(lease, PendingStep(
                    position, attempt, step, "transaction", "completed", output_json=output,
                    seq=seq, compensable=compensable,
                ), tx)  # fmt: skip
        except _BodyFailed as failed:
            raise failed.error from failed.error.__cause__
        except DatabaseUnavailable:
            if output is None:
                raise
            row = await self.get_attempt(lease.run_id, position, attempt)
            if row is None or row["status"] != "completed":
                raise
        assert output is not None
        return output
