"""Each kind of command and its lifecycle: what the engine does when workflow code
issues one (`workflow.commands`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..workflow.commands import Command
from .attributes import run_set_attributes
from .claimed import Claimed
from .compensations import run_compensate_now
from .events import run_set_event
from .patching import record_marker
from .requests import run_reply
from .steps import run_function, run_transaction
from .streams import run_stream
from .values import record_value
from .waits import run_child, run_send_signal, run_signal_wait, run_sleep

Lifecycle = Callable[[Claimed, Command, Any], Awaitable[None]]

LIFECYCLES: dict[str, Lifecycle] = {
    "function": run_function,
    "transaction": run_transaction,
    "sleep": run_sleep,
    "signal-wait": run_signal_wait,
    "signal-send": run_send_signal,
    "event": run_set_event,
    "attributes": run_set_attributes,
    "stream": run_stream,
    "child": run_child,
    "patch": record_marker,
    "value": record_value,
    "compensate": run_compensate_now,
    "reply": run_reply,
}


async def run_lifecycle(x: Claimed, cmd: Command) -> None:
    """Run what `cmd`'s kind does, with its spec."""
    await LIFECYCLES[cmd.kind](x, cmd, cmd.spec)
