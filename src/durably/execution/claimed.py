"""What a command's lifecycle (`steps`, `waits`, `events`, `patching`, `compensations`)
needs of the execution it runs in: the claim it runs under, the run's log, its undos, and
the limits. `Execution` is the one implementation; the lifecycles see nothing else of it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from datetime import datetime
from typing import Any, Protocol

from ..core.clock import Clock
from ..core.errors import DatabaseUnavailable, LeaseLostError
from ..core.sealing import Codec
from ..store.history import History
from ..store.records import Lease
from ..store.store import Store
from ..workflow.commands import Command
from .runlog import RunLog
from .undos import Undos


class Claimed(Protocol):
    """One claim of one run, as the lifecycles of its commands use it."""

    lease: Lease
    lease_s: float  # the lease's length, as claimed
    store: Store
    clock: Clock
    history: History
    threads: Executor | None  # where sync step bodies run
    heartbeat: Callable[[], Coroutine[Any, Any, None]]  # renews the lease now
    log: RunLog  # the run's log: outcomes take the next `seq`, reach the workflow in order
    max_payload: int
    codec: Codec | None  # payloads at rest are sealed with it (SPEC §4.24)
    undos: Undos  # which completed steps are undone, each once

    @property
    def run_id(self) -> str: ...

    @property
    def interrupting(self) -> bool:
        """The engine is cancelling the run's bodies."""
        ...

    async def confirm_claim(self) -> None:
        """Return once the claim is durable (before a body gets the fence)."""
        ...

    def now(self) -> datetime:
        """The database's time, estimated."""
        ...

    def encode(self, value: Any, what: str, history: bool = True) -> str: ...

    def new_attempt(self, position: int, spend: bool = True) -> int: ...

    async def record_canceled(self, cmd: Command, attempt: int, elapsed: float) -> None: ...


def is_engine_failure(exc: BaseException) -> bool:
    """A failure of the engine's own writes: the run is left to be claimed again."""
    return isinstance(exc, LeaseLostError | DatabaseUnavailable)
