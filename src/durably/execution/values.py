"""The lifecycle of a value the workflow read (`ctx.now()`, `ctx.random()`, `ctx.uuid4()`,
see `workflow.values`): the code has it already; it is recorded here, with every other
value read in the same pass, before anything issued after it starts."""

from __future__ import annotations

from ..workflow.commands import Command
from .claimed import Claimed


async def record_value(x: Claimed, cmd: Command, spec: None) -> None:
    await x.log.send_values()
