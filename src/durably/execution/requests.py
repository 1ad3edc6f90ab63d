"""The lifecycle of a `reply` command (SPEC §4.22): the answer to a request the run took
with `ctx.step.wait_for_request` (a signal wait: `waits.run_signal_wait`).

The reply is the next entry of the run's log, written with the answer in one fenced
transaction (`store.requests`): replayed from history afterwards, never sent twice; a
lost lease writes neither.
"""

from __future__ import annotations

from ..store.records import PendingStep
from ..workflow.commands import Command
from ..workflow.requests import Reply
from .claimed import Claimed


async def run_reply(x: Claimed, cmd: Command, spec: Reply) -> None:
    attempt = x.new_attempt(cmd.position)
    seq = x.log.reserve()
    step = PendingStep(cmd.position, attempt, cmd.name, cmd.kind, "completed", seq=seq)
    try:
        await x.store.requests.reply(
            x.lease, step, spec.request_id, spec.status, spec.answer_json, spec.reason
        )
    except BaseException:
        x.log.unreserve(seq)
        raise
    x.log.publish(seq, cmd, value=None)
