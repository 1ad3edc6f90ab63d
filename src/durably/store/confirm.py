"""A claim made durable on demand.

On PostgreSQL a claim commits without waiting for its WAL flush (see the `claim` query):
a signal's wake-up spent a third of its time on that flush, for a write nothing depends on
until a step body runs. A crash may lose such a claim, and the run's next claim then takes
the same fence number. So the number must not reach a body (its `StepContext`) before the
claim is durable: the first such body of a claimed batch asks `ClaimConfirmation` once for
the whole batch (one heartbeat, `Store.confirm_claims`), and the others share its answer.
"""

from __future__ import annotations

import asyncio

from ..core.errors import LeaseLostError
from .store import Store


class ClaimConfirmation:
    """The durability of one claim statement's runs, asked for once (again if that failed)."""

    def __init__(
        self, store: Store, worker_id: str, fences: dict[str, int], lease_s: float
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._fences = fences
        self._lease_s = lease_s
        self._held: asyncio.Task[set[str]] | None = None

    async def confirm(self, run_id: str) -> None:
        """Return once `run_id`'s claim is durable; LeaseLostError if the run is not held
        (a crash lost the claim, or the lease was lost since)."""
        failed = (
            self._held is not None
            and self._held.done()
            and (self._held.cancelled() or self._held.exception() is not None)
        )
        if self._held is None or failed:
            # One statement for the batch; tried again by the next body if it failed, for
            # the runs still executed then (it renews their leases).
            self._held = asyncio.get_running_loop().create_task(
                self._store.confirm_claims(self._worker_id, dict(self._fences), self._lease_s)
            )
        # Shielded: one body's lifecycle cancelled does not cancel its siblings' answer.
        held = await asyncio.shield(self._held)
        if run_id not in held:
            raise LeaseLostError(f"lost the lease on run {run_id}: its claim is not held")

    def forget(self, run_id: str) -> None:
        """Run `run_id`'s execution has ended: leave its lease alone from now on (let go
        after a failed write, it is to lapse and be claimed again)."""
        self._fences.pop(run_id, None)
