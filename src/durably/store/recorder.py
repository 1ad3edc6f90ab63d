"""Group commit of step records and run ends.

A worker executes many runs at once; their completed steps and their ends reach the
recorder in bursts (a batch of claimed runs moves in step). Everything that arrives in one
turn of the event loop goes to the database as one statement (one for records, one for
ends), and while the recorder's few statements are in flight, new arrivals wait and form
the next, larger batch. Each record and end still commits only under its own run's lease,
and each caller learns whether its own made it; a batch the database refuses for its data
is written again one by one, so a value it cannot store fails its own step or run only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from ..core.errors import DurablyError, LeaseLostError
from .records import Lease, PendingStep, RunEnd
from .store import Store

# Statements of one recorder in flight at once. Two, not four: a drain of 3-step runs at
# concurrency 50 wrote batches of 13 records instead of 10, for 25-30% less CPU a run in
# the worker and in PostgreSQL (bench.cpu, alternating); a lone run waits for none.
MAX_IN_FLIGHT = 2
Pending = tuple[Lease, PendingStep, asyncio.Future[str]]  # a record and who waits for it


class StepRecorder:
    """Writes completed steps for one worker, batching across runs."""

    def __init__(self, store: Store, worker_id: str) -> None:
        self._store = store
        self._worker_id = worker_id
        self._queue: list[Pending] = []
        self._ends: list[tuple[RunEnd, asyncio.Future[bool]]] = []
        self._in_flight: set[asyncio.Task[None]] = set()
        self._scheduled = False

    async def record(self, lease: Lease, step: PendingStep) -> str:
        """Return once the step is durable (with its run's status); LeaseLostError if its
        lease was gone.

        Even an idle recorder sends it on the loop's next turn, not at once: the workflow
        receives the result first, and if that was its last step, the run's end takes the
        record with it (see `finish`): one commit instead of two."""
        return await self.send(lease, step)

    def send(self, lease: Lease, step: PendingStep) -> asyncio.Future[str]:
        """`record` without waiting: the future of its outcome."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queue.append((lease, step, future))
        self._kick()
        return future

    def waiting(self, steps: list[PendingStep]) -> bool:
        """Every one of `steps` still waits here for its batch: a record sent now goes in
        the same statement (or a run's end takes them all, see `finish`), so it is durable
        with them (a batch refused for its data is written one record at a time, in order)."""
        queued = {id(step) for _, step, _ in self._queue}
        return all(id(step) in queued for step in steps)

    async def finish(self, end: RunEnd) -> bool:
        """End the run with its records; False if the end was refused (the caller asks
        the store why: `RunEnds.end_refused`).

        Its records still waiting here for a batch are not written twice: they go with the
        end alone, and their callers learn of them when it is written (or, refused, they
        are written as before)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        carried = {id(step) for step in end.records or ()}  # not a failed attempt's record
        riding = [item for item in self._queue if id(item[1]) in carried]
        if riding:
            self._queue = [item for item in self._queue if id(item[1]) not in carried]
            future.add_done_callback(lambda done: self._rode(riding, done))
        if self._idle():
            await self._alone(self._send_ends([(end, future)]))
            return future.result()
        self._ends.append((end, future))
        self._kick()
        return await future

    def _rode(self, riding: list[Pending], end: asyncio.Future[bool]) -> None:
        """The end `riding` went with is written: so are they; else they go on their own."""
        if not end.cancelled() and end.exception() is None and end.result():
            for _, _, future in riding:
                if not future.done():
                    future.set_result("running")  # as the run was when the end wrote them
            return
        self._queue.extend(riding)
        self._kick()

    def _idle(self) -> bool:
        return not (self._queue or self._ends or self._in_flight or self._scheduled)

    async def _alone(self, send: Coroutine[Any, Any, None]) -> None:
        """Write an end from the caller's task at once (no hop through the loop); what
        arrives meanwhile queues up behind it and forms the next batch."""
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            await send
        finally:
            self._in_flight.discard(task)
            self._kick()

    def _kick(self) -> None:
        waiting = self._queue or self._ends
        if waiting and not self._scheduled and len(self._in_flight) < MAX_IN_FLIGHT:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send_batch)

    def _send_batch(self) -> None:
        self._scheduled = False
        if self._queue and len(self._in_flight) < MAX_IN_FLIGHT:
            batch, self._queue = self._queue, []
            self._spawn(self._send(batch))
        if self._ends and len(self._in_flight) < MAX_IN_FLIGHT:
            ends, self._ends = self._ends, []
            self._spawn(self._send_ends(ends))

    def _spawn(self, send: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(send)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _send(self, batch: list[Pending]) -> None:
        try:
            await self._write(batch)
        finally:
            self._in_flight.discard(asyncio.current_task())  # type: ignore[arg-type,unused-ignore]
            self._kick()

    async def _send_ends(self, ends: list[tuple[RunEnd, asyncio.Future[bool]]]) -> None:
        try:
            await self._write_ends(ends)
        finally:
            self._in_flight.discard(asyncio.current_task())  # type: ignore[arg-type,unused-ignore]
            self._kick()

    async def _write_ends(self, ends: list[tuple[RunEnd, asyncio.Future[bool]]]) -> None:
        try:
            done = await self._store.ends.finish_many(self._worker_id, [end for end, _ in ends])
        except Exception as exc:
            if len(ends) > 1 and not isinstance(exc, DurablyError):
                for item in ends:  # the database refused something in it: each goes alone
                    await self._write_ends([item])
                return
            for _, future in ends:
                if not future.done():
                    future.set_exception(exc)
            return
        for end, future in ends:
            if not future.done():
                future.set_result(end.lease.run_id in done)

    async def _write(self, batch: list[Pending]) -> None:
        try:
            written = await self._store.steps.record_many(
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
