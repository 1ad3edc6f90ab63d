"""How a run's end is written: alone (`finish_run`, with its children in one transaction)
or by group commit with other runs' ends (`finish_many`); and what a refused end means.
Also the end of a failed workflow attempt that is retried (`retry_run`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from ..backends import Connector, Row
from ..core.codec import encode
from ..core.errors import LeaseLostError
from ..core.sealing import Codec
from .history import Recorded, cut_signal_waits
from .records import Lease, PendingStep, RunEnd


class RunEnds:
    """The ends of runs, over the connector (`channel`: the NOTIFY channel of the ends and
    cancels it writes)."""

    def __init__(self, connector: Connector, channel: str, codec: Codec | None = None) -> None:
        self.db = connector
        self.channel = channel
        self.codec = codec  # the app's: errors are sealed with it

    async def finish_many(self, worker_id: str, ends: list[RunEnd]) -> set[str]:
        """End several runs (none with children) in one statement, each as `finish_run`
        ends one; the ids of the runs ended. Any other was refused: see `end_refused`."""
        batch = ",".join(
            r.batch_entry(end.lease, self.codec) for end in ends for r in end.records or []
        )
        rows = await self.db.fetch(
            "finish_many", worker_id=worker_id, channel=self.channel, token=uuid.uuid4().hex,
            ends="[" + ",".join(end.entry for end in ends) + "]", batch=f"[{batch}]",
        )  # fmt: skip
        ended = {row["id"] for row in rows}
        # SQLite: every end, to this process's waiters (a call; nothing marks runs awaited
        # there). PostgreSQL: nothing; the statement notified the awaited ends (await_runs).
        for run_id in ended:
            self.db.notify_local(f"ended:{run_id}")
        if rows:
            self.db.notify_local("run")
        return ended

    async def end_refused(self, lease: Lease) -> bool:
        """A run's end was not written: False if it was canceled meanwhile and is still
        ours (the caller compensates and ends it canceled); else LeaseLostError."""
        if await self.db.fetch("check_lease", **lease.params()):
            return False
        raise LeaseLostError(f"lost the lease on run {lease.run_id}; its end was not recorded")

    async def finish_run(
        self,
        lease: Lease,
        status: str,
        output_json: str | None = None,
        error: dict[str, Any] | None = None,
        children: bool = False,
        records: list[PendingStep] | None = None,
    ) -> bool:
        """End the run, writing `records` (step records not yet durable) with it; with
        `children`, in the same transaction cancel the children it leaves behind (unless
        started to be abandoned). False: the run was canceled meanwhile and is still ours
        (the caller compensates and ends it canceled)."""
        batch = "[" + ",".join(r.batch_entry(lease, self.codec) for r in records or []) + "]"
        params = dict(
            lease.params(), status=status, output=output_json, channel=self.channel,
            error=encode(error, "error", codec=self.codec) if error else None,
            token=uuid.uuid4().hex,
            batch=batch,
        )  # fmt: skip
        canceled: list[Row] = []
        if not children:  # one statement, one round trip
            rows = await self.db.fetch("finish_run", **params)
        else:
            async with self.db.transaction() as tx:
                # The run's tree first, in id order, as a cancel locks it (see lock_tree).
                await tx.fetch("lock_tree", run_id=lease.run_id)
                rows = await tx.fetch("finish_run", **params)
                for child in await tx.fetch("live_children", run_id=lease.run_id) if rows else []:
                    canceled += await tx.fetch(
                        "cancel_tree", run_id=child["id"], channel=self.channel,
                        token=uuid.uuid4().hex, error=encode({
                            "type": "ParentClosed",
                            "message": f"parent run {lease.run_id} ended {status}",
                        }, "error"),
                    )  # fmt: skip
        if not rows:
            return await self.end_refused(lease)
        for row in canceled:
            self.db.notify_local(f"cancel:{row['id']}")
        self.db.notify_local(f"ended:{lease.run_id}")  # SQLite only: see finish_many
        self.db.notify_local("run")
        return True

    async def retry_run(
        self, lease: Lease, error: dict[str, Any], delay_s: float, resumes: Iterable[int] = ()
    ) -> None:
        """End a failed workflow attempt and make the run due again in `delay_s` (`resumes`:
        the run's, as claimed).

        The attempt's waits end with it, in this transaction: every one still running, those
        its execution never reached too (begun by an earlier claim of the attempt), so no
        send delivers to a wait nobody will read; a signal one holds goes back to the run's
        own buffer. The next attempt replays only what came before the first step that
        failed for good (`_replay.History`): a signal that a wait after it took goes back
        too, so the wait running again receives it. Committed with the retry or not at all,
        each is given back exactly once.
        """
        # The run is locked before its attempts, as a send and a cancel lock them: the
        # retry and an addressed send deadlocked, and a retry that lost left its run to be
        # claimed a lease later. Aborted all the same (by another order), it is run again.
        await self.db.retrying(lambda: self._retry_run(lease, error, delay_s, resumes),
                               "retry_run")  # fmt: skip

    async def _retry_run(
        self, lease: Lease, error: dict[str, Any], delay_s: float, resumes: Iterable[int]
    ) -> None:
        async with self.db.transaction() as tx:
            await tx.send("get_run_for_update", run_id=lease.run_id)
            entries = await tx.fetch("log_rows", run_id=lease.run_id)
            for wait in (r for r in map(Recorded.from_entry, entries) if r.waiting):
                await tx.send(
                    "abandon_wait", **lease.params(), position=wait.position, attempt=wait.attempt
                )
            for wait in cut_signal_waits(entries, lease.workflow_attempt, resumes):
                await tx.send(
                    "give_back_signal", **lease.params(), position=wait.position, seq=wait.seq
                )
            rows = await tx.fetch(
                "retry_run",
                **lease.params(),
                error=encode(error, "error", codec=self.codec),
                delay_s=delay_s,
            )
            if not rows:  # nothing of this transaction is committed
                raise LeaseLostError(f"lost the lease on run {lease.run_id}")
