"""Operating runs (§4.18), for the client API of `Durably`: resume and fork, events,
signal housekeeping, retention, and what is stuck. `Durably` hands each of these calls on
to the `Operating` it owns (`client.app`): the API's documentation is here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..core.codec import encode
from ..core.durations import Duration, parse_duration
from ..core.errors import ConfigurationError, InvalidInput, WorkflowTimeoutError
from ..core.limits import TimeUp, within
from ..core.sealing import ENCRYPTED
from ..store.models import TERMINAL, Run, StepAttempt
from ..store.operations import Operations, Signal
from ..store.queues import QueueClaims
from ..store.records import NewRun
from ..store.streams import Streams
from .reads import Reads, empty

if TYPE_CHECKING:
    from ..store.endwatch import EndWatch
    from ..workflow.definition import Definition
    from .handle import RunHandle


class Operated(Protocol):
    """What operating runs needs of the app: to connect, and a handle on a run it forks."""

    async def open(self) -> None: ...

    def handle(self, run_id: str) -> RunHandle[Any]: ...


class Operating:
    """The operators' half of `Durably`'s client API, over the tables' `Operations`."""

    def __init__(
        self,
        app: Operated,
        reads: Reads,
        end_watch: EndWatch,
        workflows: Mapping[tuple[str, str], Definition[Any, Any]],
        max_payload: int,
    ) -> None:
        self.app = app
        self.reads = reads  # the inspection reads' (replica or primary)
        self.store = store = reads.primary
        self.end_watch = end_watch
        self.workflows = workflows  # the app's registry, as it grows
        self.max_payload = max_payload
        self.operations = Operations(store)

    async def resume(self, run_id: str) -> Run:
        """Continue a failed or canceled run from its last completed step.

        Completed steps are replayed from history, never run again; a step that failed
        gets a fresh retry budget, and so does the workflow. The run is `pending` at once.

        Raises:
            RunNotFound: no such run.
            InvalidInput: the run is not failed or canceled (nothing was written).
        """
        await self.app.open()
        self.reads.wrote()
        return await self.operations.resume(run_id)

    async def fork(
        self, run_id: str, from_position: int, version: str | None = None
    ) -> RunHandle[Any]:
        """Start a new run whose history is the first `from_position` entries of run
        `run_id`'s log, with the same input, on `version` (default: the old one's; it need
        not be registered here: workers that serve it take the run).

        The log is every outcome the workflow received, counted from 1 in the order it
        received them: a step that completed, or failed for good (a failure the code caught
        counts: the fork replays it, so the code takes the same path), a sleep, a signal
        wait, a child, a signal sent, an event set, a `patched` marker. Retried attempts
        and compensations do not count. An out-of-range `from_position` is refused with
        the log listed. The new run has the old one's search attributes as they are now
        (those its code set included: the copied steps replay, they do not set again).

        Example:
            ```python
            handle = await app.fork(run_id, from_position=3, version="v2")
            ```

        Raises:
            RunNotFound: no such run, or it was purged while being forked (nothing was
                written).
            InvalidInput: `from_position` is out of range (nothing was written).
        """
        await self.app.open()
        old = await self.store.get_run(run_id)
        if old.input == ENCRYPTED:  # it cannot be copied: a key this app lacks
            raise ConfigurationError(
                f"run {run_id}'s input is encrypted with a key this app "
                "lacks: fork it with the app's keys (DURABLY_CODEC_KEYS)"
            )
        version = version or old.version
        wf = self.workflows.get((old.workflow, version))
        new = NewRun(
            workflow=old.workflow, version=version,
            max_attempts=wf.retry.max_attempts if wf is not None else 1,
            input_json=encode(old.input, "the input", self.max_payload, self.store.codec),
            queue=old.queue, concurrency_key=old.concurrency_key, priority=old.priority,
            attributes_json=encode(old.attributes, "the attributes") if old.attributes else None,
        )  # fmt: skip  # a fork stays under its queue's limits
        self.reads.wrote()
        run = await self.operations.fork(old, from_position, new)
        handle = self.app.handle(run.run_id)
        handle.run = run
        return handle

    async def list_steps(self, run_id: str) -> list[StepAttempt]:
        """Every step attempt of a run, oldest first."""
        await self.app.open()
        return await self.reads.read(lambda store: store.list_steps(run_id))

    async def run_id_from_prefix(self, prefix: str) -> str:
        """The run id that `prefix` (the whole id, or 8 or more of its first characters)
        names; RunNotFound, or InvalidInput when several runs start with it."""
        await self.app.open()
        return await self.operations.run_by_prefix(prefix)

    # ----------------------------------------------------------------- events

    async def get_event(self, run_id: str, key: str, timeout: Duration | None = None) -> Any:
        """The latest value run `run_id` set for `key` (`ctx.step.set_event`); if it has
        set none yet, wait for the first (None once `timeout` has passed). The timeout
        bounds the whole call, connecting and reading included.

        Raises:
            RunNotFound: no such run.
            WorkflowTimeoutError: `timeout` passed before the events could be read at all
                (None would say the run set none).
        """
        limit = parse_duration(timeout).total_seconds() if timeout is not None else None
        read: list[bool] = []  # whether the events were read at all
        if limit is not None and limit <= 0:  # no waiting: the event as it is, once
            return (await self._read_event(run_id, key, read))[1]
        try:
            return await within(limit, self._first_event(run_id, key, read))
        except TimeUp:
            if not read:
                raise WorkflowTimeoutError(
                    f"the events of run {run_id} could not be read within {limit:g}s"
                ) from None
            return None

    async def _read_event(self, run_id: str, key: str, read: list[bool]) -> tuple[bool, Any]:
        """(whether run `run_id` has set `key`, its value); RunNotFound. `read` notes it."""
        await self.app.open()
        await self.store.get_run(run_id)  # RunNotFound
        found = await self.operations.get_event(run_id, key)
        read.append(True)
        return found

    async def _first_event(self, run_id: str, key: str, read: list[bool]) -> Any:
        found, value = await self._read_event(run_id, key, read)
        if found:
            return value
        async with self.end_watch.watching_events(run_id) as changed:  # the app's listener
            while True:
                found, value = await self.operations.get_event(run_id, key)
                if found:
                    return value
                changed.clear()
                # The fallback poll covers a lost LISTEN connection.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), 1.0)

    async def list_events(self, run_id: str) -> dict[str, Any]:
        """Every event key run `run_id` has set, with its latest value."""
        await self.app.open()
        return await self.reads.read(lambda s: Operations(s).list_events(run_id), empty)

    # ----------------------------------------------------------------- streams

    async def list_streams(self, run_id: str, last: int = 0) -> list[dict[str, Any]]:
        """Run `run_id`'s streams: `{"key", "length", "closed"}` each (open or closed by
        `close_stream`; all are closed once the run has ended); with `last`, each also
        has its latest `last` values, `"last": [{"offset", "value"}, ...]`."""
        if not isinstance(last, int) or isinstance(last, bool) or last < 0:
            raise InvalidInput(f"last is a number of values from 0, not {last!r}")
        await self.app.open()
        return await self.reads.read(lambda store: Streams(store).list_streams(run_id, last))

    # ----------------------------------------------------------------- signals

    async def list_signals(
        self, name: str | None = None, pending: bool = True, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Stored signals, oldest first: those buffered for a future wait (`pending`, not
        expired), or all that are kept. Each is
        `{"id", "name", "data", "created_at", "expires_at", "consumed_by", ...}`."""
        await self.app.open()
        found: list[Signal] = await self.reads.read(
            lambda s: Operations(s).list_signals(name, pending, limit)
        )
        return [s.to_dict() for s in found]

    async def delete_signal(self, signal_id: int) -> None:
        """Delete a stored signal (a stale buffered one, say); SignalNotFound if none."""
        await self.app.open()
        self.reads.wrote()
        await self.operations.delete_signal(signal_id)

    # ----------------------------------------------------------------- retention

    async def purge(
        self,
        older_than: Duration = "30 days",
        status: list[str] | str | None = None,
        *,
        workflow: str | None = None,
    ) -> dict[str, int]:
        """Delete runs that finished more than `older_than` ago (`"0s"`: every finished
        run), with their steps, the signals they consumed and those left in their own
        buffer (addressed to them, or put back by a resume), in short batches.

        Args:
            older_than: how long a finished run is kept (by `finished_at`).
            status: only runs that ended so (default: completed, failed and canceled).
            workflow: only runs of the workflow of this name (then signals that belong to
                no run stay).

        Returns:
            `{"runs": N, "signals": N}`, how many were deleted.
        """
        older_s = parse_duration(older_than).total_seconds()
        statuses = [status] if isinstance(status, str) else list(status or sorted(TERMINAL))
        wrong = [s for s in statuses if s not in TERMINAL]
        if wrong or not statuses:
            raise InvalidInput(
                f"purge status must be among completed, failed, canceled, not {wrong or '[]'}"
            )
        await self.app.open()
        self.reads.wrote()
        return await self.operations.purge(older_s, statuses, workflow=workflow)

    # ----------------------------------------------------------------- what is stuck

    async def list_stuck(self, limit: int = 100) -> list[Run]:
        """Due runs that no live worker runs the (workflow, version) of, runs that have
        been due for over 30 s (workers are missing or saturated), and held runs (their
        replay did not match their history: the deployed code must be fixed)."""
        await self.app.open()
        return await self.reads.read(lambda s: s.list_stuck(limit, grace_s=30, alive_s=60))

    async def queue_counts(self) -> list[dict[str, Any]]:
        """Each queue declared in the database: its limits, `running` and `waiting` runs."""
        await self.app.open()
        return await self.reads.read(lambda s: QueueClaims(s).counts())

    async def list_tables(self) -> list[str]:
        """The engine's tables (schema-qualified on PostgreSQL)."""
        await self.app.open()
        return await self.store.list_tables()
