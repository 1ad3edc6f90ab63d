"""Continue-as-new, as written (SPEC §4.23): the run ends `continued` and the next run of
its chain is inserted in the same fenced transaction (a lost lease commits neither), and
reading a chain to its end (`follow`).

What the next run takes from the one it continues (see `continue_run` in the queries):
workflow, version, namespace, queue, concurrency key and priority (it queues for a slot as
a new start does: the slot the old run held is freed by its end), deadline (the chain's,
not renewed), parent and `parent_close` (a parent waits for the chain's end: its child
wait follows the chain, execution/waits.py), the trace context, and the idempotency key,
which moves to it (a start with the key returns the newest run of the chain). It starts
with attempts at 0 and an empty history. Signals buffered for the old run move to it.

Requests (store/requests.py, SPEC §4.22) still unanswered move with them: re-addressed to
`next_id` in `_continue`'s transaction, so the run that takes one can answer it; one the
old run took but did not answer is given back to the next run's buffer (after those still
buffered there).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from ..backends import Connector, Row
from ..core.codec import encode
from .ends import RunEnds
from .models import REQUEST_PREFIX, Run
from .records import Lease, PendingStep

# A chain longer than this is read as a loop in the data (a defect), not followed on.
MAX_CHAIN = 1_000_000


class RunContinues:
    """Runs that continue as new, over the connector (`channel`: the NOTIFY channel)."""

    def __init__(self, connector: Connector, channel: str, ends: RunEnds) -> None:
        self.db = connector
        self.channel = channel
        self.ends = ends

    async def continue_run(
        self,
        lease: Lease,
        next_id: str,
        input_json: str,
        idempotency_key: str | None,
        records: list[PendingStep] | None = None,
    ) -> bool:
        """End the run `continued` as `next_id`, which starts with `input_json`, writing
        `records` with it; its children (unless started to be abandoned) are canceled, as
        at any end. False: the run was canceled meanwhile and is still ours (the caller
        compensates and ends it canceled). LeaseLostError: nothing was written."""
        ended = await self.db.retrying(
            lambda: self._continue(lease, next_id, input_json, idempotency_key, records),
            "continue_run",
        )  # fmt: skip
        if not ended:
            return await self.ends.end_refused(lease)
        self.db.notify_local(f"ended:{lease.run_id}")  # SQLite only: see RunEnds.finish_many
        self.db.notify_local("run")
        return True

    async def _continue(
        self,
        lease: Lease,
        next_id: str,
        input_json: str,
        idempotency_key: str | None,
        records: list[PendingStep] | None,
    ) -> bool:
        output = encode({"continued_as": next_id}, "the run's output")
        cancels: list[Row] = []
        async with self.db.transaction() as tx:
            # Ended as `RunEnds.finish_run` ends a run with children: the tree locked
            # first, in id order, then the fenced end; nothing else is written unless it is.
            await tx.fetch("lock_tree", run_id=lease.run_id)
            batch = (
                "[" + ",".join(r.batch_entry(lease, self.ends.codec) for r in records or []) + "]"
            )
            rows = await tx.fetch(
                "finish_run", **lease.params(), status="continued", output=output, error=None,
                channel=self.channel, token=uuid.uuid4().hex, batch=batch,
            )  # fmt: skip
            if not rows:
                return False
            await tx.send("continue_key", run_id=lease.run_id)
            await tx.fetch(
                "continue_run", run_id=lease.run_id, next_id=next_id, input=input_json,
                idempotency_key=idempotency_key, channel=self.channel,
            )  # fmt: skip
            # Its requests still unanswered are the next run's: their signals moved with
            # it (one it took goes back to its buffer), and only the run a request is
            # stored under can answer it.
            await tx.send("continue_requests", run_id=lease.run_id, next_id=next_id,
                          prefix=REQUEST_PREFIX)  # fmt: skip
            for child in await tx.fetch("live_children", run_id=lease.run_id):
                cancels += await tx.fetch(
                    "cancel_tree", run_id=child["id"], channel=self.channel,
                    token=uuid.uuid4().hex, error=encode({
                        "type": "ParentClosed",
                        "message": f"parent run {lease.run_id} continued as {next_id}",
                    }, "error"),
                )  # fmt: skip
        for row in cancels:
            self.db.notify_local(f"cancel:{row['id']}")
        return True


async def follow(get_run: Callable[[str], Awaitable[Run]], run: Run) -> Run:
    """The last run of `run`'s chain as stored now (`run` itself if it did not continue)."""
    for _ in range(MAX_CHAIN):
        next_id = run.continued_as
        if next_id is None:
            return run
        run = await get_run(next_id)
    raise RuntimeError(f"the chain of run {run.run_id} does not end")  # a loop in the data
