"""Starting runs, for the client API of `Durably`: a run started by a registered workflow
or, on a thin client, by name alone; and a handle on a run found by its id or by the
idempotency key it was started with. `Durably` hands each of these calls on to the
`Starting` it owns (`client.app`): the API's documentation is here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from ..core import telemetry as _telemetry
from ..core.attributes import Attributes, encode_attributes
from ..core.codec import encode
from ..core.durations import Duration, parse_instant
from ..core.errors import InvalidInput, RunNotFound
from ..store.models import Run
from ..store.records import NEWEST, UNKNOWN_ATTEMPTS, Debounce, NewRun
from ..workflow.debounce import debounce_of
from .handle import Client, RunHandle
from .reads import Reads
from .workflow import Workflow


class Starter(Client, Protocol):
    """What starting runs needs of the app: what its handles need, and its registry."""

    @property
    def workflows(self) -> Mapping[tuple[str, str], Workflow[Any, Any]]: ...

    def get_workflow(self, name: str, version: str | None = None) -> Workflow[Any, Any]: ...

    def handle(self, run_id: str) -> RunHandle[Any]: ...


class Starting:
    """The starting half of `Durably`'s client API: runs written to the primary."""

    def __init__(self, app: Starter, reads: Reads) -> None:
        self.app = app
        self.reads = reads  # told of each start: the reads after it go to the primary
        self.store = reads.primary

    async def create_run(self, new: NewRun, connection: Any = None) -> tuple[Run, bool]:
        """Write run `new` (in `connection`'s transaction, if given), traced; the run, and
        whether it was created now (False: its idempotency key or debounce window had
        one already)."""
        await self.app.open()
        with _telemetry.start_span(new.workflow, new.version) as carrier:
            new = dataclasses.replace(new, trace_context=_telemetry.encode_carrier(carrier))
            self.reads.wrote()
            return await self.store.create_run(new, connection)

    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: str | None = None,
        idempotency_key: str | None = None,
        available_at: datetime | str | None = None,
        deadline_at: datetime | str | None = None,
        connection: Any = None,
        concurrency_key: str | None = None,
        priority: int = 0,
        debounce: Duration | None = None,
        debounce_key: str | None = None,
        debounce_max: Duration | None = None,
        attributes: Attributes | None = None,
    ) -> RunHandle[Any]:
        """Start workflow `workflow` by name (see `Workflow.start`).

        An app that registers workflows starts one of them, validating the input (the
        newest registered version when `version` is None; `WorkflowNotFound` for a name
        or version it does not register). An app that registers none (a thin client,
        `Durably(url)` alone) starts the run without the code: the input is stored as
        given, and the worker that claims it validates it there (a bad input fails the
        run with `InvalidInput`, not retried). With `version=None`, that worker runs the
        newest version it registers and writes it on the run. A name no worker registers
        stays `pending` (`durably runs --stuck` lists it).

        Example:
            ```python
            client = Durably("postgresql://localhost/app")  # no workflow code here
            handle = await client.start("place-order", {"id": "o1"}, idempotency_key="o1")
            ```
        """
        if not self.app.workflows:
            window = debounce_of(
                debounce, debounce_key, debounce_max, idempotency_key=idempotency_key,
                available_at=available_at,
            )  # fmt: skip
            return await self._start_by_name(
                workflow, input, version, idempotency_key, available_at, deadline_at,
                connection, concurrency_key, priority, window, attributes,
            )  # fmt: skip
        wf = self.app.get_workflow(workflow, version)
        return await wf.start(
            input, idempotency_key=idempotency_key, available_at=available_at,
            deadline_at=deadline_at, connection=connection, concurrency_key=concurrency_key,
            priority=priority, debounce=debounce, debounce_key=debounce_key,
            debounce_max=debounce_max,
            attributes=attributes,
        )  # fmt: skip

    async def _start_by_name(
        self, workflow: str, input: Any, version: str | None, idempotency_key: str | None,
        available_at: datetime | str | None, deadline_at: datetime | str | None,
        connection: Any, concurrency_key: str | None, priority: int,
        window: Debounce | None = None,
        attributes: Attributes | None = None,
    ) -> RunHandle[Any]:  # fmt: skip
        """A thin client's start: written as given, bound and validated by its worker."""
        if not isinstance(workflow, str) or not workflow:
            raise InvalidInput(f"a workflow name must be a non-empty string, not {workflow!r}")
        if version is not None and (not isinstance(version, str) or not version):
            raise InvalidInput(f"a version must be a non-empty string, not {version!r}")
        app = self.app
        now = datetime.fromtimestamp(app.clock.time(), UTC)
        new = NewRun(
            workflow=workflow, version=version or NEWEST, max_attempts=UNKNOWN_ATTEMPTS,
            input_json=encode(
                input, f"input of workflow {workflow!r}", app.max_payload, app.codec
            ),
            idempotency_key=idempotency_key,
            available_at=parse_instant(available_at, now) if available_at else None,
            deadline_at=parse_instant(deadline_at, now) if deadline_at else None,
            concurrency_key=concurrency_key, priority=priority, debounce=window,
            attributes_json=encode_attributes(attributes, f"attributes of workflow {workflow!r}"),
        )  # fmt: skip
        run, created = await self.create_run(new, connection)
        return RunHandle(app, run.run_id, run, joined=window is not None and not created)

    async def run_handle(
        self,
        run_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        workflow: str | None = None,
    ) -> RunHandle[Any]:
        """A handle on the run with this id, or on the run this app's namespace started
        with `idempotency_key` (a business id: `"order-42"`); `handle.run` is the run read.

        Args:
            run_id: the run's id; or, instead of it,
            idempotency_key: the key the run was started with, and
            workflow: the name of its workflow (needed when runs of several workflows
                were started with that key).

        Raises:
            RunNotFound: no such run.
            InvalidInput: runs of several workflows have that key and `workflow` is not given.

        Example:
            ```python
            handle = await app.run_handle(idempotency_key="order-42", workflow="place-order")
            await handle.result()
            ```
        """
        if (run_id is None) == (idempotency_key is None) or (run_id and workflow):
            raise TypeError("run_handle() takes a run id, or idempotency_key= (and workflow=)")
        if run_id is not None:
            handle = self.app.handle(run_id)
            await handle.get()
            return handle
        run = await self._run_started_with(idempotency_key, workflow)
        return RunHandle(self.app, run.run_id, run)

    async def _run_started_with(self, idempotency_key: str | None, workflow: str | None) -> Run:
        """The run this app's namespace started with `idempotency_key` (of `workflow`);
        RunNotFound, or InvalidInput when runs of several workflows have that key."""
        await self.app.open()
        namespace = self.store.namespace
        found = await self.store.list_runs(
            namespace=namespace, idempotency_key=idempotency_key, workflow=workflow
        )  # one run per workflow at most: the key is unique per namespace and workflow
        if not found:
            of = f" of workflow {workflow!r}" if workflow else ""
            raise RunNotFound(f"no run{of} with idempotency key {idempotency_key!r} in "
                              f"namespace {namespace!r}")  # fmt: skip
        if len(found) > 1:
            names = ", ".join(sorted(r.workflow for r in found))
            raise InvalidInput(f"idempotency key {idempotency_key!r} started runs of several "
                               f"workflows ({names}): say which workflow")  # fmt: skip
        return found[0]
