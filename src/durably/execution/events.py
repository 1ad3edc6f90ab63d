"""Events a run publishes for its clients: `ctx.step.set_event(key, value)`.

An event is a step of kind "event" named by its key: recorded once, as the next entry of
the run's log, and replayed from history afterwards (it is never written twice). Its value
is the step's output, so the latest value of a key is the output of its newest record;
`Durably.get_event` reads it, woken by a NOTIFY (PostgreSQL) or a commit (SQLite).

A value once set stays published: clients may have read it. A resume keeps every event the
run set (they are completed entries of its log); a workflow retry that cuts history before
an event leaves its value the latest until the code sets the key again (the event step
runs again there, and its new record wins).
"""

from __future__ import annotations

from ..store.operations import Operations
from ..workflow.commands import Command, SetEvent
from .claimed import Claimed


async def run_set_event(x: Claimed, cmd: Command, spec: SetEvent) -> None:
    attempt = x.new_attempt(cmd.position)
    seq = x.log.reserve()
    try:
        await Operations(x.store).set_event(
            x.lease, cmd.position, attempt, cmd.name, seq, spec.value_json
        )
    except BaseException:
        x.log.unreserve(seq)
        raise
    x.log.publish(seq, cmd, value=None)
