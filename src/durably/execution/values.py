"""The lifecycle of a value the workflow read (`ctx.now()`, `ctx.random()`, `ctx.uuid4()`,
see `workflow.values`): the code has it already; it is recorded (`RunLog.send_values`:
with the records of the pass that read it, if it can), durable before anything issued
after it starts."""

from __future__ import annotations

from ..workflow.commands import Command
from .claimed import Claimed


async def record_value(x: Claimed, cmd: Command, spec: None) -> None:
    await x.log.value_durable(cmd)
