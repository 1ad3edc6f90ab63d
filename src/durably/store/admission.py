"""Per-key strategies on the start path (SPEC §4.23): what a start does when its queue's
`concurrency_key` is full, decided by the database inside the start's transaction.

A queue declared with `on_full="cancel_running"` or `"cancel_new"` admits each keyed
start in the transaction that inserts it: the start locks its key (`lock_key`: an
advisory lock on PostgreSQL, the IMMEDIATE transaction's write lock on SQLite), then
reads the key's other runs that hold or want a slot (`key_runs`: pending, running, held,
waiting and due; canceled ones still running their compensations), in a statement of its
own, so it sees every start of the key admitted before it (READ COMMITTED takes a new
snapshot per statement). Starts of one key are admitted one after the other, whichever
process starts them; starts of other keys, and claims, are not held up.

- `cancel_new`: when `per_key` runs of the key already hold or want a slot, the newcomer
  is canceled at once (it exists, `canceled`, its error says why).
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
from typing import TYPE_CHECKING

from ..core.codec import encode
from .models import TERMINAL, Run

if TYPE_CHECKING:
    from ..backends import Tx
    from .records import NewRun


def admits(new: NewRun) -> bool:
    """Whether the start `new` is admitted on its key (a keyed start of a strategy)."""
    return new.on_full != "wait" and new.concurrency_key is not None and new.per_key is not None


class Admission:
    """Admits keyed starts of queues with an `on_full` strategy (see the module)."""

    def __init__(self, channel: str) -> None:
        self.channel = channel

    async def admit(self, tx: Tx, run: Run, new: NewRun) -> tuple[Run, list[str]]:
        """Apply `new.on_full` to the run just inserted; (the run as it now is, the ids of
        the runs this canceled, to wake this process's listeners once committed)."""
        assert new.queue is not None and new.concurrency_key is not None
        assert new.per_key is not None
        key = {"queue": new.queue, "key": new.concurrency_key}
        await tx.fetch("lock_key", **key)
        others = await tx.fetch("key_runs", **key, id=run.run_id)
        where = f"queue {new.queue!r}, concurrency_key {new.concurrency_key!r}"
        if new.on_full == "cancel_new":
            if len(others) < new.per_key:
                return run, []
            error = {"type": "Canceled", "message": (
                f"{where} is full: {len(others)} run(s) hold or wait for its "
                f"{new.per_key} slot(s) (on_full='cancel_new'); start again once they end"
            )}  # fmt: skip
            gone = await self._cancel(tx, run.run_id, error)
            [row] = await tx.fetch("get_run", run_id=run.run_id)
            return Run.from_row(row), gone
        # cancel_running: the newcomer and the newest per_key - 1 others stay.
        older = [r["id"] for r in others if not r["compensating"]][new.per_key - 1 :]
        error = {"type": "Canceled", "message": (
            f"superseded by run {run.run_id}: {where} runs its newest {new.per_key} "
            "(on_full='cancel_running')"
        )}  # fmt: skip
        canceled: list[str] = []
        for run_id in sorted(older):  # trees locked one by one, in id order
            canceled += await self._cancel(tx, run_id, error)
        return run, canceled

    async def _cancel(self, tx: Tx, run_id: str, error: dict[str, str]) -> list[str]:
        """The normal cancel of `run_id`'s tree (as `Store.cancel`), unless it ended."""
        root = [r for r in await tx.fetch("lock_tree", run_id=run_id) if r["id"] == run_id]
        if not root or root[0]["status"] in TERMINAL or root[0]["status"] == "continued":
            return []
        rows = await tx.fetch(
            "cancel_tree", run_id=run_id, error=encode(error, "error"),
            channel=self.channel, token=uuid.uuid4().hex,
        )  # fmt: skip
        return [r["id"] for r in rows]
