"""Requests with answers (SPEC §4.22): a client's question to one run, and the run's answer.

A request is a signal addressed to its run on the reserved name `request:<name>`
(`request_signal`), so it is buffered FIFO, taken by a wait (`ctx.step.wait_for_request`,
a signal wait) and given back by a `wait_first` loser exactly as a signal is; its row here
holds the answer. The run answers with a `reply` step: its record and the answer are one
transaction, fenced by the lease, and only a pending request takes an answer, so the
client gets exactly one, through replay, a kill -9 or a workflow retry that replies again.
The answer wakes the client by the run's `event:<id>` NOTIFY (`EndWatch.watching_events`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from ..backends import Connector
from ..core.codec import decode
from ..core.errors import InvalidInput
from .models import REQUEST_PREFIX
from .records import Lease, PendingStep
from .sends import Sends


def envelope(request_id: str, name: str, data_json: str) -> str:
    """The signal a request is delivered as: its id and name readable to SQL (a request
    taken before continue-as-new is found by its id, `continue_requests`), its data as
    encoded (sealed, with a codec)."""
    return f'{{"id": {json.dumps(request_id)}, "name": {json.dumps(name)}, "data": {data_json}}}'


def request_signal(name: str) -> str:
    """The signal a request named `name` is sent as."""
    return REQUEST_PREFIX + name


@dataclass(frozen=True)
class Answer:
    """A request as stored: `status` is pending, answered (`answer`) or rejected (`reason`)."""

    request_id: str
    run_id: str
    name: str
    status: str
    answer: Any
    reason: str | None


class Requests:
    """The requests of a namespace's runs, over the connector; sent through `sends`."""

    def __init__(self, connector: Connector, channel: str, sends: Sends) -> None:
        self.db = connector
        self.channel = channel
        self.sends = sends

    async def send(
        self, run_id: str, name: str, data_json: str, idempotency_key: str | None
    ) -> tuple[str, bool]:
        """Store the request and deliver it to run `run_id` (or buffer it there); (its id,
        whether it is new: an `idempotency_key` sent before names the earlier one, which is
        not delivered again). RunNotFound, RunTerminalError: nothing was stored."""
        signal = request_signal(name)

        async def once() -> tuple[str, bool]:
            async with self.db.transaction() as tx:
                # Under the name's lock, as the send that follows: one key, one request.
                await self.sends.lock_signal(tx, signal)
                # Addressed to a run that continued as new: its chain's last run takes it,
                # and the request is that run's (its answer is written under its lease). A
                # finished one is refused by the send below, unless the key names an answer.
                live, _ = await self.sends.chain_end(tx, run_id)
                if idempotency_key is not None:
                    found = await tx.fetch(
                        "find_request", run_id=live, idempotency_key=idempotency_key
                    )
                    if found:
                        return str(found[0]["id"]), False
                request_id = uuid.uuid4().hex
                # The send refuses a finished or unknown run before anything is written.
                await self.sends.send_signal_in(
                    tx, signal, envelope(request_id, name, data_json), None, live
                )
                await tx.send(
                    "insert_request", id=request_id, run_id=live, name=name,
                    idempotency_key=idempotency_key,
                )  # fmt: skip
            return request_id, True

        sent = await self.db.retrying(once, "send_request")
        if sent[1]:
            self.db.notify_local("run")
        return sent

    async def get(self, request_id: str) -> Answer:
        rows = await self.db.fetch("get_request", id=request_id)
        if not rows:
            raise InvalidInput(f"no request with id {request_id!r}")
        row = rows[0]
        return Answer(row["id"], row["run_id"], row["name"], row["status"],
                      decode(row["answer"]), row["reason"])  # fmt: skip

    async def reply(
        self, lease: Lease, step: PendingStep, request_id: str, status: str,
        answer_json: str | None, reason: str | None,
    ) -> None:  # fmt: skip
        """Record the `reply` step and answer the request, in one transaction under the
        lease (LeaseLostError: neither is written). A request answered before (by an
        earlier workflow attempt) keeps its first answer."""
        async with self.db.transaction() as tx:
            await self.sends.steps.record_finish(lease, step, tx)
            await tx.send(
                "answer_request", id=request_id, run_id=lease.run_id, status=status,
                answer=answer_json, reason=reason, channel=self.channel,
            )  # fmt: skip
        self.db.notify_local(f"event:{lease.run_id}")
