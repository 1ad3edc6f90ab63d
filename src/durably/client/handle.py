"""`RunHandle`: a started run, to ask its status, wait for its result, cancel it; and
`Client`, what a handle (and a workflow bound to an app) needs of the app."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from ..core.clock import Clock
from ..core.codec import validate
from ..core.durations import Duration, parse_duration
from ..core.errors import RunFailedError, WorkflowTimeoutError
from ..core.limits import TimeUp, within
from ..core.sealing import Codec
from ..store.continues import follow
from ..store.endwatch import EndWatch
from ..store.models import Run
from ..store.records import NewRun
from ..store.store import Store

Out = TypeVar("Out", covariant=True)


class Client(Protocol):
    """The app as its handles and workflows use it (`Durably` is one)."""

    clock: Clock
    max_payload: int
    codec: Codec | None  # payloads at rest are sealed with it
    end_watch: EndWatch
    store: Store  # the primary's: a wait reads it, never a replica that lags

    async def open(self) -> None: ...

    async def get_run(self, run_id: str) -> Run: ...

    async def cancel(self, run_id: str) -> Run: ...

    async def create_run(self, new: NewRun, connection: Any = None) -> tuple[Run, bool]: ...

    async def send_signal(
        self, name: str, data: Any = None, *, idempotency_key: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]: ...  # fmt: skip


class RunHandle(Generic[Out]):
    """A started run: ask its status, wait for its result, cancel it.

    `await handle.result()` is the run's output validated into the workflow's return
    annotation (a pydantic model, dataclass, TypedDict or builtin), so a
    `RunHandle[Done]` from `Workflow[Order, Done].start` gives a `Done`.
    """

    def __init__(
        self, app: Client, run_id: str, run: Run | None = None, *, output_type: Any = Any,
        joined: bool = False,
    ) -> None:  # fmt: skip
        self.app = app
        self.run_id = run_id
        self.run = run
        self.output_type = output_type
        self.joined = joined  # a debounced start that joined its window's pending run

    def __repr__(self) -> str:
        return f"<RunHandle {self.run_id}>"

    async def get(self) -> Run:
        """The run as stored now."""
        self.run = await self.app.get_run(self.run_id)
        return self.run

    async def status(self) -> str:
        """The run's status now."""
        return (await self.get()).status

    async def cancel(self) -> Run:
        """Cancel the run (see `Durably.cancel`)."""
        return await self.app.cancel(self.run_id)

    async def signal(
        self, name: str, data: Any = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Send signal `name` to this run only (`Durably.send_signal` with `run_id=`): its
        wait for `name` receives it, or, none waiting yet, its next one does (no other
        run's wait takes it).

        `idempotency_key` de-duplicates sends of signal `name` whichever run they address,
        as `Durably.send_signal`'s does: a key that holds the run id keeps sends to two
        runs apart.

        Returns:
            `{"delivered_to": [this run's id] or [], "buffered": bool, "duplicate": bool}`

        Raises:
            RunTerminalError: the run has finished.
            RunNotFound: there is no such run (purged).
            InvalidInput: `data` has no JSON form, or `name` is blank.

        Example:
            ```python
            handle = await place_order.start(order)
            await handle.signal(f"approval:{order.id}", {"approved": True, "by": "ana"})
            ```
        """
        return await self.app.send_signal(
            name, data, idempotency_key=idempotency_key, run_id=self.run_id
        )

    async def wait(self, timeout: Duration | None = None) -> Run:
        """Wait until the run has ended (a canceled run: its compensations too); the run.
        A held run has not ended: it waits for code that matches its history. A run that
        continued as new has not either: this waits for the end of its chain (SPEC §4.23)
        and returns the chain's last run (its `run_id` is that run's).

        Raises:
            WorkflowTimeoutError: `timeout` passed first.
        """
        with self.app.clock.awaiting_result():
            return await self._wait(timeout)

    async def _wait(self, timeout: Duration | None) -> Run:
        limit = parse_duration(timeout).total_seconds() if timeout is not None else None
        if limit is not None and limit <= 0:  # no waiting: the run as it is, once
            await self.app.open()
            run = await follow(self.app.store.get_run, await self.app.store.get_run(self.run_id))
            if run.done:
                return run
            raise self._timed_out(limit, run)
        read: list[Run] = []  # the run as last read
        try:
            return await within(limit, self._until_done(read))
        except TimeUp:
            raise self._timed_out(limit or 0.0, read[-1] if read else None) from None

    def _timed_out(self, limit: float, run: Run | None) -> WorkflowTimeoutError:
        status = f"still {run.status}" if run else "not read yet"
        return WorkflowTimeoutError(f"run {self.run_id} is {status} after {limit}s")

    async def _until_done(self, read: list[Run]) -> Run:
        await self.app.open()  # before listening: a bad database fails here, as a read would
        run_id: str | None = self.run_id
        while run_id is not None:  # along the chain of runs that continued as new
            async with self.app.end_watch.watching(run_id) as waiter:
                while True:
                    read[:] = [await self.app.store.get_run(run_id)]
                    if run_id == self.run_id:
                        self.run = read[0]
                    if read[0].done:
                        break
                    await waiter.wait(None)
            run_id = read[0].continued_as
        return read[0]

    async def result(self, timeout: Duration | None = None) -> Out:
        """Wait for the run to finish; its output, as the workflow's return type.

        Raises:
            RunFailedError: the run failed or was canceled.
            WorkflowTimeoutError: `timeout` passed first.
            InvalidInput: the stored output does not fit the return annotation (the
                workflow's code changed since the run finished).
        """
        run = await self.wait(timeout)
        if run.status != "completed":
            raise RunFailedError(run.run_id, run.status, run.error)
        value: Out = validate(self.output_type, run.output, f"the output of run {run.run_id}")
        return value
