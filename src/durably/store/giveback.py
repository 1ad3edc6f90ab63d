"""How a signal a wait holds goes back to its run, when the workflow will not receive it: a
`wait_first` loser that ended (`give_back_signal`) or that is abandoned (`abandon_wait`).

A wait that began while the signal was on its way back found the run's buffer empty and,
as a recorded wait, receives only what is delivered to it: the give-back hands the signal
to it, else leaves it in the buffer for the next wait. (A workflow retry gives back in its
own transaction: see `RunEnds.retry_run`.)
"""

from __future__ import annotations

from typing import Any

from ..backends import Connector, Row
from ..core.errors import LeaseLostError
from .records import Lease
from .sends import Sends


class GiveBacks:
    """Signals given back by a run's waits, over the connector, under the name's lock
    that `sends` takes for a send."""

    def __init__(self, connector: Connector, sends: Sends) -> None:
        self.db = connector
        self.sends = sends

    async def abandon_wait(
        self, lease: Lease, position: int, attempt: int, signal: str | None = None
    ) -> int | None:
        """End a wait the workflow stopped awaiting. A signal delivered to it goes back to
        the run: with the `signal` it waits for, as `give_back_signal` gives one back;
        without, to the run's buffer (as a workflow retry ends its attempt's waits, see
        `RunEnds.retry_run`)."""
        where = dict(position=position, attempt=attempt)
        if signal is None:
            rows = await self.db.fetch("abandon_wait", **lease.params(), **where)
            _held(rows, lease)
            return None
        return await self._give_back(lease, signal, "abandon_wait", where)

    async def give_back_signal(
        self, lease: Lease, signal: str, position: int, seq: int
    ) -> int | None:
        """The workflow stopped awaiting the wait for `signal` at `position` after it ended
        (as log entry `seq`): the signal it took, if any, goes back to the run, once.

        The position of the run's wait that received it, if one had begun meanwhile (the
        caller takes it up: a send would have poked it); None if it is in the run's buffer.
        """
        return await self._give_back(
            lease, signal, "give_back_signal", dict(position=position, seq=seq)
        )

    async def _give_back(
        self, lease: Lease, signal: str, query: str, where: dict[str, Any]
    ) -> int | None:
        """`query` puts the signal a wait holds back in the run's buffer, then
        `deliver_buffered` hands it to the run's wait on that name that began meanwhile, if
        one did. Under the name's lock, as a send, so no wait begins in between; one round
        trip (everything goes with the COMMIT)."""

        async def once() -> tuple[list[Row], list[Row]]:
            async with self.db.transaction() as tx:
                await self.sends.lock_signal(tx, signal)
                back = await tx.send(query, **lease.params(), **where)
                given = await tx.send("deliver_buffered", **lease.params(), name=signal)
            return await back.rows(), await given.rows()

        back, given = await self.db.retrying(once, query)
        _held(back, lease)
        return given[0]["position"] if given else None


def _held(rows: list[Row], lease: Lease) -> None:
    """What a fenced statement that counts the lease it `held` says: raise if none."""
    if not rows or not rows[0]["held"]:
        raise LeaseLostError(f"lost the lease on run {lease.run_id}")
