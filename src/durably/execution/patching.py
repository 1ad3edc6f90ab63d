"""The lifecycle of a patch marker (`ctx.patched`, see `workflow.patching`): recorded,
and durable before anything issued after it starts."""

from __future__ import annotations

from ..store.records import PendingStep
from ..workflow.commands import Command
from ..workflow.patching import KIND
from .claimed import Claimed


async def record_marker(x: Claimed, cmd: Command, spec: None) -> None:
    attempt = x.new_attempt(cmd.position, spend=False)
    try:
        await x.log.settle_durable(cmd, PendingStep(
            cmd.position, attempt, cmd.name, KIND, "completed", output_json="true",
        ), value=True)  # fmt: skip
    finally:
        x.log.marker_durable(cmd.position)
