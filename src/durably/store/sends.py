"""How signals are sent and taken: a client's send (in its own transaction or the
caller's), a step's send, a wait's begin and end, all serialized per signal name by the
name's lock, so that a wait never misses a send in flight.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from ..backends import Connector, Fetched, Row, Sent, Tx
from ..core.codec import decode, encode
from ..core.errors import InvalidInput, LeaseLostError, RunNotFound, RunTerminalError
from .models import REQUEST_PREFIX, TERMINAL
from .records import Lease, PendingStep
from .steps import StepRecords


def check_signal_name(name: object) -> str:
    """`name` if it can name a signal; an empty or blank name (a form left empty, an
    unset variable) would be stored and never waited for, and a request's reserved name
    would reach its wait as a request nobody can answer: refused before anything is
    written."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"a signal needs a name that is not blank, not {name!r}")
    if name.startswith(REQUEST_PREFIX):  # a wait_for_request would take it as a request
        raise InvalidInput(
            f"signal names starting {REQUEST_PREFIX!r} are reserved for requests: send "
            f"{name!r} as app.request(run_id, {name.removeprefix(REQUEST_PREFIX)!r}, data)"
        )
    return name


class Sends:
    """The signals of a namespace, over the connector; a step that sends or waits is
    recorded by the `steps` it is given, in the same transaction."""

    def __init__(
        self, connector: Connector, namespace: str, channel: str, steps: StepRecords
    ) -> None:
        self.db = connector
        self.namespace = namespace
        self.channel = channel
        self.steps = steps

    async def send_signal(
        self,
        name: str,
        data_json: str,
        idempotency_key: str | None,
        run_id: str | None,
        external: Any = None,
        expires_s: float | None = None,
    ) -> dict[str, Any]:
        async def send() -> dict[str, Any]:
            async with self.db.transaction(external) as tx:
                sent = await self.send_signal_in(
                    tx, name, data_json, idempotency_key, run_id, expires_s
                )
            return await sent()  # read after the commit: the send was one round trip

        # A send locks the attempts and runs it reaches, in an order of its own: one that
        # loses a deadlock (with a run's end, say) is run again, as a cancel is (a fetch is
        # run again by the connector itself); in the caller's transaction, the caller decides.
        if external is None and idempotency_key is None and run_id is None:
            # Nothing to look up first: the send alone, one statement that takes the name's
            # lock itself, without a transaction's BEGIN and COMMIT around it.
            params = self._signal_params(name, data_json, None, None, expires_s)
            result = _sent(await self.db.fetch("send_signal", **params), duplicate=False)
        else:
            result = await (
                send() if external is not None else self.db.retrying(send, "send_signal")
            )
        if result["delivered_to"]:
            self.db.notify_local("run")
        return result

    async def send_signal_in(
        self, tx: Tx, name: str, data_json: str, idempotency_key: str | None, run_id: str | None,
        expires_s: float | None = None,
    ) -> Callable[[], Awaitable[dict[str, Any]]]:  # fmt: skip
        """Deliver to every waiter (or the addressed run), else buffer; in the caller's tx.
        What it did (`{"delivered_to", "buffered", "duplicate"}`) is read by awaiting the
        returned call, best once `tx` has ended (then the whole send took its commit)."""
        # The name's lock serializes sends and waits on one name, so that a wait never
        # misses a send in flight: the send takes it; what is looked up before the send is
        # looked up under it too.
        if idempotency_key is not None or run_id is not None:
            await self.lock_signal(tx, name)
        sent: Sent | None = None
        if idempotency_key is not None:
            found = await tx.fetch(
                "find_signal", namespace=self.namespace, name=name,
                idempotency_key=idempotency_key,
            )  # fmt: skip
            sent = Fetched(found) if found else None
        duplicate = sent is not None
        if sent is None:
            if run_id is not None:
                run_id = await self.live_run(tx, run_id, "signal")
            sent = await tx.send(
                "send_signal",
                **self._signal_params(name, data_json, idempotency_key, run_id, expires_s),
            )

        async def outcome() -> dict[str, Any]:
            return _sent(await sent.rows(), duplicate)

        return outcome

    def _signal_params(
        self, name: str, data_json: str, idempotency_key: str | None, run_id: str | None,
        expires_s: float | None,
    ) -> dict[str, Any]:  # fmt: skip
        return {
            "namespace": self.namespace, "name": name, "data": data_json,
            "idempotency_key": idempotency_key, "run_id": run_id, "expires_s": expires_s,
            "channel": self.channel, "token": uuid.uuid4().hex,
        }  # fmt: skip

    async def live_run(self, tx: Tx, run_id: str, action: str) -> str:
        """Lock the run against a concurrent end until `tx` ends; refuse a finished one.
        The lock is the one the send takes next to wake the run (a share lock taken first
        made two sends to one run each wait for the other's: a deadlock). A run that
        continued as new is followed along its chain (SPEC §4.23): the id returned is the
        run the send addresses. Each run of it is locked in turn, oldest first: only a
        continue writes the next, after its own end, so no lock is waited for in reverse."""
        run_id, status = await self.chain_end(tx, run_id)
        if status in TERMINAL:
            raise RunTerminalError(run_id, status, action)
        return run_id

    async def chain_end(self, tx: Tx, run_id: str) -> tuple[str, str]:
        """The run `run_id`'s chain ends in (itself, if it did not continue as new), locked
        as `live_run` says, and its status. RunNotFound."""
        while True:
            rows = await tx.fetch("get_run_to_signal", run_id=run_id)
            if not rows:
                raise RunNotFound(f"no run with id {run_id!r}")
            status = str(rows[0]["status"])
            if status != "continued":
                return run_id, status
            run_id = decode(rows[0]["output"])["continued_as"]

    async def lock_signal(self, tx: Tx, name: str) -> None:
        """Serialize with every send and wait on `name` until `tx` ends."""
        await tx.send("lock_signal", namespace=self.namespace, name=name)

    async def take_signal(self, tx: Tx, name: str, run_id: str) -> Row | None:
        await self.lock_signal(tx, name)
        rows = await tx.fetch("take_signal", namespace=self.namespace, name=name, run_id=run_id)
        return rows[0] if rows else None

    async def resolve_wait(
        self,
        lease: Lease,
        position: int,
        attempt: int,
        signal: str | None,
        status: str,
        output_json: str | None,
        error: dict[str, Any] | None,
        seq: int,
    ) -> tuple[str | None, bool]:
        """End a wait as log entry `seq`; (the output stored, whether it is a delivered
        signal's data: a timeout that raced a send loses to it)."""
        async with self.db.transaction() as tx:
            if signal is not None:
                await self.lock_signal(tx, signal)
            rows = await tx.fetch(
                "resolve_wait", **lease.params(), position=position, attempt=attempt,
                status=status, output=output_json, seq=seq,
                error=encode(error, "error", codec=self.steps.codec) if error else None,
            )  # fmt: skip
        if not rows:
            raise LeaseLostError(f"lost the lease on run {lease.run_id}")
        output: str | None = rows[0]["output"]
        return output, bool(rows[0]["delivered"])

    async def begin_signal_wait(
        self, lease: Lease, position: int, attempt: int, step: str, signal: str,
        timeout_s: float | None, seq: int,
    ) -> tuple[str | None, datetime | None]:  # fmt: skip
        """Take a buffered signal (recorded as log entry `seq`), or record the wait;
        (the signal's data or None, the wait's timeout)."""
        async with self.db.transaction() as tx:
            taken = await self.take_signal(tx, signal, lease.run_id)
            if taken is not None:
                await self.steps.record_finish(lease, PendingStep(
                    position, attempt, step, "signal-wait", "completed",
                    output_json=taken["data"], seq=seq, signal=signal,
                    signal_expires_at=taken["expires_at"],
                ), tx)  # fmt: skip
                return taken["data"] or "null", None
            wake_at = await self.steps.record_start(
                lease, position, attempt, step, "signal-wait", tx=tx, signal=signal,
                wait_s=timeout_s,
            )  # fmt: skip
        return None, wake_at

    async def send_signal_step(
        self, lease: Lease, position: int, attempt: int, step: str, seq: int, signal: str,
        data_json: str, key: str | None, run_id: str | None, encode_result: Any,
        expires_s: float | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Send a signal and record the sending step (log entry `seq`) in one transaction."""
        async with self.db.transaction() as tx:
            await self.steps.check_lease(tx, lease)
            sent = await self.send_signal_in(tx, signal, data_json, key, run_id, expires_s)
            result = await sent()
            await self.steps.record_finish(lease, PendingStep(
                position, attempt, step, "signal-send", "completed",
                output_json=encode_result(result), seq=seq,
            ), tx)  # fmt: skip
        self.db.notify_local("run")
        return result


def _sent(rows: list[Row], duplicate: bool) -> dict[str, Any]:
    """What a send did, from its row (the signal stored, or found by its key)."""
    return {"delivered_to": decode(rows[0]["delivered_to"]),
            "buffered": bool(rows[0]["buffered"]), "duplicate": duplicate}  # fmt: skip
