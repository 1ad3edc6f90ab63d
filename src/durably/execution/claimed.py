"""What a command's lifecycle (`steps`, `waits`, `events`, `patching`) needs of the
execution it runs in: the claim it runs under, the run's log, and the limits. `Execution`
is the one implementation; the lifecycles see nothing else of it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from datetime import datetime
from typing import Any, Protocol

from ..core.clock import Clock
from ..store.history import History
from ..store.records import Lease
from ..store.store import Store
from ..workflow.commands import Command
from .runlog import RunLog


class Claimed(Protocol):
    """One claim of one run, as the lifecycles of its commands use it."""

    lease: Lease
    lease_s: float  # the lease's length, as claimed
    store: Store
    clock: Clock
    history: History
    threads: Executor | None  # where sync step bodies run
    heartbeat: Callable[[], Coroutine[Any, Any, None]]  # renews the lease now
    interrupting: bool  # the engine is cancelling the run's bodies
    log: RunLog  # the run's log: outcomes take the next `seq`, reach the workflow in order
    max_payload: int

    @property
    def run_id(self) -> str: ...

    async def confirm_claim(self) -> None:
        """Return once the claim is durable (before a body gets the fence)."""
        ...

    def now(self) -> datetime:
        """The database's time, estimated."""
        ...

    def encode(self, value: Any, what: str, history: bool = True) -> str: ...

    def new_attempt(self, position: int, spend: bool = True) -> int: ...

    @staticmethod
    def is_engine_failure(exc: BaseException) -> bool: ...

    async def record_canceled(self, cmd: Command, attempt: int, elapsed: float) -> None: ...

    def take_undos(self, through: int | None = None) -> list[Command]:
        """The completed steps to undo now, newest first, taken (nothing else undoes them):
        those whose results are log entries up to `through` (all: None), not taken yet by
        a `compensate()` (live or replayed) or the run's end. An earlier claim may have run
        some of their undos already (`run_compensation` does not run those again)."""
        ...

    def undo_failed(self, cmd: Command) -> None:
        """`cmd`'s undo failed for good: it may be taken again (at the run's end)."""
        ...
