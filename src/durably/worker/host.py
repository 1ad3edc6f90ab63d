"""What a worker needs of the app it serves: `Durably` is one (the worker never sees the
client API above it)."""

from __future__ import annotations

from collections.abc import Mapping, MutableSet
from datetime import timedelta
from typing import Any, Protocol

from ..backends import Connector
from ..core.clock import Clock
from ..core.sealing import Codec
from ..store.models import Run
from ..store.records import NewRun
from ..store.store import Store
from ..workflow.definition import Definition
from ..workflow.queue import Queue


class Host(Protocol):
    """The registry, the store and the limits a worker executes runs with."""

    url: str
    clock: Clock
    namespace: str
    store: Store
    connector: Connector
    max_payload: int
    codec: Codec | None  # payloads at rest are sealed with it
    max_step_attempts: int
    max_history_bytes: int
    retention: timedelta | None

    @property
    def workflows(self) -> Mapping[tuple[str, str], Definition[Any, Any]]: ...

    @property
    def queues(self) -> Mapping[str, Queue]: ...

    @property
    def workers_running(self) -> MutableSet[Any]:
        """The workers running now, which the app's `close()` stops first."""
        ...

    async def open(self) -> None: ...

    async def create_run(self, new: NewRun, connection: Any = None) -> tuple[Run, bool]: ...
