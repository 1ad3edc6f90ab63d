"""Group commit of step records.

A worker executes many runs at once; their completed steps reach the recorder in bursts
(a batch of claimed runs moves in step). Everything that arrives in one turn of the event
loop goes to the database as one statement, and while the recorder's few statements are
in flight, new records wait and form the next, larger batch. Each record still commits
only under its own run's lease, and each caller learns whether its own record made it; a
batch the database refuses for its data is written again record by record, so a record it
cannot store fails its own step only.
"""

from __future__ import annotations

import asyncio

from ._errors import DurablyError, LeaseLostError
from ._records import Lease, PendingStep
from ._store import Store

MAX_IN_FLIGHT = 4


class StepRecorder:
    """Writes completed steps for one worker, batching across runs."""

    def __init__(self, store: Store, worker_id: str) -> None:
        self._store = store
        self._worker_id = worker_id
        self._queue: list[tuple[Lease, PendingStep, asyncio.Future[str]]] = []
        self._in_flight: set[asyncio.Task[None]] = set()
        self._scheduled = False

    async def record(self, lease: Lease, step: PendingStep) -> str:
        """Return once the step is durable (with its run's status); LeaseLostError if its
        lease was gone."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if not self._queue and not self._in_flight and not self._scheduled:
            # Alone: write it from this task at once (no hop through the loop); records
            # arriving meanwhile queue up behind it and form the next batch.
            task = asyncio.current_task()
            assert task is not None
            self._in_flight.add(task)
            try:
                await self._send([(lease, step, future)])
            finally:
                self._in_flight.discard(task)
                self._kick()
            return future.result()  # raises LeaseLostError (or the database's error)
        self._queue.append((lease, step, future))
        self._kick()
        return await future

    def _kick(self) -> None:
        if self._queue and not self._scheduled and len(self._in_flight) < MAX_IN_FLIGHT:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send_batch)

    def _send_batch(self) -> None:
        self._scheduled = False
        if not self._queue or len(self._in_flight) >= MAX_IN_FLIGHT:
            return
        batch, self._queue = self._queue, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _send(self, batch: list[tuple[Lease, PendingStep, asyncio.Future[str]]]) -> None:
        try:
            await self._write(batch)
        finally:
            self._in_flight.discard(asyncio.current_task())  # type: ignore[arg-type,unused-ignore]
            if self._queue:
                self._kick()

    async def _write(self, batch: list[tuple[Lease, PendingStep, asyncio.Future[str]]]) -> None:
        try:
            written = await self._store.record_many(
                self._worker_id, [(lease, step) for lease, step, _ in batch]
            )
        except Exception as exc:
            if len(batch) > 1 and not isinstance(exc, DurablyError):
                # The database refused the statement for something in it (data it cannot
                # store): one run's record must not fail the others', so each goes alone.
                for item in batch:
                    await self._write([item])
                return
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for lease, step, future in batch:
            if future.done():
                continue
            status = written.get((lease.run_id, step.position, step.attempt))
            if status is not None:
                future.set_result(status)
            else:
                future.set_exception(LeaseLostError(
                    f"lost the lease on run {lease.run_id}; the result of step "
                    f"{step.name!r} was not recorded and another worker will run it"
                ))  # fmt: skip
