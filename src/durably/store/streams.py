"""Streams (§4.21): values a run publishes as it goes, each at the next offset of its key
(dense from 0), read in order from any offset.

A workflow's write (`ctx.step.write_stream`) is a step of kind "stream": the value, its
offset and the step record commit in one transaction, so a kill between them leaves
neither, and a replay (which finds the record) writes nothing. A step body's write
(`sctx.write_stream`) is the value alone, under the run's lease. A write needs the run's
lease and an open stream; a closed stream, or a run that has ended, takes no more.

A stream is closed by `ctx.step.close_stream`, or by its run's end (any terminal status):
readers stop at either. The end is not written into the stream: a run resumed after it
(`app.resume`) writes on to the streams it had not closed. Offsets are dense and commit in
order: the offset is taken on the stream's row, which stays locked until the commit. Its
rows go with the run (ON DELETE CASCADE), retention included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from ..backends import Tx
from ..core.codec import decode, encode
from ..core.errors import InvalidInput, LeaseLostError, RunNotFound
from .models import TERMINAL
from .records import Lease
from .store import Store

READ_BATCH = 500  # values a reader takes per query


@dataclass(frozen=True)
class StreamState:
    """Whether a stream takes no more values: closed, or its run has ended."""

    status: str
    closed: bool

    @property
    def ended(self) -> bool:
        return self.closed or self.status in TERMINAL


class Streams:
    """The stream tables, over the store's connector."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db

    async def write_step(
        self, lease: Lease, position: int, attempt: int, step: str, key: str, seq: int,
        value_json: str,
    ) -> int:  # fmt: skip
        """Append a workflow's value and record its step (output: the offset), at once."""
        if self.db.dialect == "postgresql":  # one statement (see stream_write)
            return await self._write_step_pg(lease, position, attempt, step, key, seq,
                                             value_json)  # fmt: skip
        async with self.db.transaction() as tx:
            offset = await self._take(tx, lease, key)
            output = encode(offset, "offset")
            rows = await tx.fetch(
                "stream_step", **lease.params(), position=position, attempt=attempt,
                step=step, seq=seq, output=output,
            )  # fmt: skip
            if not rows:
                raise LeaseLostError(f"lost the lease on run {lease.run_id}; "
                                     f"stream {key!r} not written")  # fmt: skip
            await self._put(tx, lease.run_id, key, offset, value_json)
        self.db.notify_local(f"stream:{lease.run_id}")
        return offset

    async def _write_step_pg(
        self, lease: Lease, position: int, attempt: int, step: str, key: str, seq: int,
        value_json: str,
    ) -> int:  # fmt: skip
        async with self.db.transaction() as tx:
            rows = await tx.fetch(
                "stream_write", **lease.params(), position=position, attempt=attempt,
                step=step, key=key, seq=seq, value=value_json, channel=self.store.channel,
            )  # fmt: skip
            if rows and rows[0]["recorded"]:
                return int(rows[0]["offset"])
            if rows:  # recorded before: nothing of this one may stay
                raise LeaseLostError(f"lost the lease on run {lease.run_id}; "
                                     f"stream {key!r} not written")  # fmt: skip
            await self._refused(tx, lease, key)
        raise AssertionError("unreachable")  # pragma: no cover

    async def close_step(
        self, lease: Lease, position: int, attempt: int, step: str, key: str, seq: int
    ) -> None:
        """Close stream `key` and record the close as a step, at once."""
        async with self.db.transaction() as tx:
            closed = await tx.fetch(
                "stream_close", run_id=lease.run_id, fence=lease.fence,
                worker_id=lease.worker_id, key=key, channel=self.store.channel,
            )  # fmt: skip
            rows = await tx.fetch(
                "stream_step", **lease.params(), position=position, attempt=attempt,
                step=step, seq=seq, output="null",
            )  # fmt: skip
            if not closed or not rows:
                raise LeaseLostError(f"lost the lease on run {lease.run_id}; "
                                     f"stream {key!r} not closed")  # fmt: skip
        self.db.notify_local(f"stream:{lease.run_id}")

    async def append(self, lease: Lease, key: str, value_json: str) -> int:
        """A step body's write: the value alone, at the stream's next offset."""
        async with self.db.transaction() as tx:
            offset = await self._take(tx, lease, key)
            await self._put(tx, lease.run_id, key, offset, value_json)
        self.db.notify_local(f"stream:{lease.run_id}")
        return offset

    async def _take(self, tx: Tx, lease: Lease, key: str) -> int:
        rows = await tx.fetch(
            "stream_take", run_id=lease.run_id, fence=lease.fence,
            worker_id=lease.worker_id, key=key,
        )  # fmt: skip
        if rows:
            return int(rows[0]["offset"])
        await self._refused(tx, lease, key)

    async def _refused(self, tx: Tx, lease: Lease, key: str) -> NoReturn:
        """Why a write took no offset: the stream is closed, or the lease is gone."""
        state = await tx.fetch("stream_state", run_id=lease.run_id, key=key)
        if state and state[0]["closed"]:
            raise InvalidInput(f"stream {key!r} of run {lease.run_id} is closed")
        raise LeaseLostError(f"lost the lease on run {lease.run_id}; stream {key!r} not written")

    async def _put(self, tx: Tx, run_id: str, key: str, offset: int, value_json: str) -> None:
        await tx.fetch(
            "stream_put", run_id=run_id, key=key, offset=offset, value=value_json,
            channel=self.store.channel,
        )  # fmt: skip

    async def state(self, run_id: str, key: str) -> StreamState:
        """RunNotFound when there is no such run (a stream never written is open)."""
        rows = await self.db.fetch("stream_state", run_id=run_id, key=key)
        if not rows:
            raise RunNotFound(f"no run with id {run_id!r}")
        return StreamState(rows[0]["status"], bool(rows[0]["closed"]))

    async def poll(
        self, run_id: str, key: str, from_offset: int, limit: int = READ_BATCH
    ) -> tuple[StreamState, list[tuple[int, Any]]]:
        """The stream's state and its (offset, value) from `from_offset` on, up to `limit`,
        in one snapshot (one round trip a reader's wake-up). RunNotFound: no such run."""
        rows = await self.db.fetch(
            "stream_poll", run_id=run_id, key=key, from_offset=from_offset, limit=limit
        )
        if not rows:
            raise RunNotFound(f"no run with id {run_id!r}")
        state = StreamState(rows[0]["status"], bool(rows[0]["closed"]))
        return state, [(int(r["offset"]), decode(r["value"])) for r in rows
                       if r["offset"] is not None]  # fmt: skip

    async def read(
        self, run_id: str, key: str, from_offset: int, limit: int = READ_BATCH
    ) -> list[tuple[int, Any]]:
        """(offset, value) from `from_offset` on, in order, up to `limit` of them."""
        rows = await self.db.fetch(
            "stream_read", run_id=run_id, key=key, from_offset=from_offset, limit=limit
        )
        return [(int(r["offset"]), decode(r["value"])) for r in rows]

    async def list_streams(self, run_id: str, last: int = 0) -> list[dict[str, Any]]:
        """A run's streams: `{"key", "length", "closed"}` each, and with `last`, its
        latest values (`"last": [{"offset", "value"}, ...]`, oldest first)."""
        rows = await self.db.fetch("stream_list", run_id=run_id)
        found = [{"key": r["key"], "length": int(r["length"]), "closed": bool(r["closed"])}
                 for r in rows]  # fmt: skip
        for stream in found if last > 0 else ():
            # At most the stream's length: a `last` past any integer SQL holds is all of it.
            length = stream["length"]
            values = await self.read(
                run_id, stream["key"], max(0, length - last), min(last, length)
            )
            stream["last"] = [{"offset": at, "value": value} for at, value in values]
        return found
