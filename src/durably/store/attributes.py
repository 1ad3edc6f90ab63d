"""Search attributes as written (SPEC §4.24, `core.attributes`): the run's own, merged by
its code's `ctx.step.set_attributes` (a step of kind "attributes"); those given at start
are written with the run (`insert_run`) and carried to the next run of a chain that
continues as new (`continue_run`).

The merge and the step's record are one fenced write: the record's insert is what merges,
so the step's attributes are merged once, however often the write is tried (a record of
the attempt there already merges nothing), and a lost lease writes neither.
"""

from __future__ import annotations

from ..backends import Connector
from ..core.errors import LeaseLostError
from .records import Lease

KIND = "attributes"


class RunAttributes:
    """Writes of a run's search attributes, over the connector."""

    def __init__(self, connector: Connector) -> None:
        self.db = connector

    async def merge(
        self, lease: Lease, position: int, attempt: int, step: str, seq: int, output: str
    ) -> None:
        """Record the step at `position` (its output: `output`, the attributes' JSON) and
        merge `output` into the run's attributes; LeaseLostError if the lease is gone."""
        rows = await self.db.fetch(
            "set_attributes", **lease.params(), position=position, attempt=attempt,
            step=step, seq=seq, output=output,
        )  # fmt: skip
        if not rows:
            raise LeaseLostError(
                f"lost the lease on run {lease.run_id}; its attributes were not set"
            )
