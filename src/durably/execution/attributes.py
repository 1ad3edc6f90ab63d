"""The lifecycle of `ctx.step.set_attributes` (SPEC §4.24): a step of kind "attributes",
recorded once as the next entry of the run's log, and merged into the run's search
attributes by that same write (`store.attributes`). A replay hands back the record and
writes nothing; a workflow retry that cuts history before it sets them again (the latest
value of a key wins, as the code sets them in order).
"""

from __future__ import annotations

from ..workflow.commands import Command, SetAttributes
from .claimed import Claimed


async def run_set_attributes(x: Claimed, cmd: Command, spec: SetAttributes) -> None:
    attempt = x.new_attempt(cmd.position)
    seq = x.log.reserve()
    try:
        await x.store.attributes.merge(
            x.lease, cmd.position, attempt, cmd.name, seq, spec.attributes_json
        )
    except BaseException:
        x.log.unreserve(seq)
        raise
    x.log.publish(seq, cmd, value=None)
