"""Per-key strategies on the start path (SPEC §4.23): what a start does when its queue's
`concurrency_key` is full, decided by the database inside the start's transaction.

A queue declared with `on_full="cancel_running"` or `"cancel_new"` admits each keyed
start in the transaction that inserts it: the start locks its key (`lock_key`: an
advisory lock on PostgreSQL, the IMMEDIATE transaction's write lock on SQLite), then
reads the key's other runs that hold or want a slot (`key_runs`: pending, running, held,
waiting and due; canceled ones still running their compensations), in a statement of its
own, so it sees every start of the key admitted before it (READ COMMITTED takes a new
snapshot per statement). Starts of one key are admitted one after the other, whichever
process starts them; starts of other keys, and claims, are not held up. The run is
inserted before the lock is taken: of two starts of a key at once, the one that locks
second reads the first, committed, whatever the order of their inserts.

- `cancel_new`: when `per_key` runs of the key already hold or want a slot, the newcomer
  is canceled at once (`refuse_run`: it exists, `canceled`, its error says why; no
  worker ever saw it, so there is nothing to interrupt or undo).
- `cancel_running`: the key's older runs beyond the newest `per_key` (the newcomer among
  them) are canceled through the normal cancel (`lock_tree`, `cancel_tree`): a running
  one is interrupted by its worker and compensates (it keeps its slot until its undos have
  run), a queued one ends at once. So the newest run (search-as-you-type).

A run asleep or waiting for a signal or a child holds no slot (as on the claim path): it
is neither counted nor canceled; once due again it waits for a slot like any other.
The strategy applied is the one the starting code declares (`NewRun.on_full`); the
queue's row shows the one its workers declared (`queue_counts`).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ..core.codec import encode
from .models import Run

if TYPE_CHECKING:
    from ..backends import Row, Sent, Tx
    from .records import NewRun


def admits(new: NewRun) -> bool:
    """Whether the start `new` is admitted on its key (a keyed start of a strategy)."""
    return new.on_full != "wait" and new.concurrency_key is not None and new.per_key is not None


class Admission:
    """Admits keyed starts of queues with an `on_full` strategy (see the module)."""

    def __init__(self, channel: str) -> None:
        self.channel = channel

    async def insert(
        self, tx: Tx, new: NewRun, params: dict[str, Any]
    ) -> tuple[list[Row], list[Row]]:
        """Insert the run (`insert_run`'s `params`), lock its key, read the key's other
        runs: (the run inserted, none if its idempotency key had one; the others). One
        round trip where the transaction is pipelined: the server runs them in order, and
        key_runs takes its snapshot once the lock is held."""
        key = {"queue": new.queue, "key": new.concurrency_key}
        inserted = await tx.send("insert_run", **params)
        await tx.send("lock_key", **key)
        others = await tx.fetch("key_runs", **key, id=params["id"])
        return await inserted.rows(), others

    async def admit(
        self, tx: Tx, run: Run, new: NewRun, others: list[Row]
    ) -> tuple[Run, list[Sent]]:
        """Apply `new.on_full` to the run just inserted, given the key's `others`; (the run
        as it now is, the cancels sent: their rows, the runs canceled, read once committed
        cost nothing and wake this process's listeners)."""
        assert new.per_key is not None
        where = f"queue {new.queue!r}, concurrency_key {new.concurrency_key!r}"
        if new.on_full == "cancel_new":
            if len(others) < new.per_key:
                return run, []
            error = {"type": "Canceled", "message": (
                f"{where} is full: {len(others)} run(s) hold or wait for its "
                f"{new.per_key} slot(s) (on_full='cancel_new'); start again once they end"
            )}  # fmt: skip
            [row] = await tx.fetch("refuse_run", id=run.run_id, error=encode(error, "error"))
            return Run.from_row(row), []
        # cancel_running: the newcomer and the newest per_key - 1 others stay.
        older = [r["id"] for r in others if not r["compensating"]][new.per_key - 1 :]
        error = {"type": "Canceled", "message": (
            f"superseded by run {run.run_id}: {where} runs its newest {new.per_key} "
            "(on_full='cancel_running')"
        )}  # fmt: skip
        return run, [await self._cancel(tx, run_id, error) for run_id in sorted(older)]

    async def _cancel(self, tx: Tx, run_id: str, error: dict[str, str]) -> Sent:
        """The normal cancel of `run_id`'s tree (`lock_tree`, then `cancel_tree`, as
        `Store.cancel`), sent: pipelined, the victims' cancels cost one round trip. A run
        that ended since key_runs read it is left as it is (cancel_tree's own test)."""
        await tx.send("lock_tree", run_id=run_id)
        return await tx.send(
            "cancel_tree", run_id=run_id, error=encode(error, "error"),
            channel=self.channel, token=uuid.uuid4().hex,
        )  # fmt: skip
