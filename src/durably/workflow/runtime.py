"""What the step API (`ctx.step`, `ctx.patched`) needs of the run it issues commands
into. The engine's `Execution` is one; `durably.testing.replay` is another, which runs no
step and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from ..core.sealing import Codec
from ..store.history import History
from .commands import Command


class Runtime(Protocol):
    """A run whose workflow code issues commands, one position after another."""

    max_payload: int
    codec: Codec | None  # payloads at rest are sealed with it (SPEC §4.24)
    history: History  # what the run recorded before this pass

    @property
    def run_id(self) -> str: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The workflow's own loop (see `execution.loop`): futures are made on it."""
        ...

    def issue(self, make: Callable[[int], Command], name: str, kind: str) -> Command:
        """Give the workflow's next command its position (`make(position)` builds it) and
        check it against history; raises if the code cannot go on (replay diverged)."""
        ...

    def next_position(self) -> int:
        """The position the next command will take."""
        ...

    def received(self) -> int:
        """The log entry (`seq`) the workflow received last."""
        ...

    def encode(self, value: Any, what: str) -> str:
        """`value` as the JSON to record, refused (InvalidInput) as the engine refuses it."""
        ...

    def now(self) -> datetime:
        """The time a new `ctx.now()` reads (the database's clock, as estimated)."""
        ...

    def value_pending(self, cmd: Command, output_json: str) -> None:
        """The code received a new value (`ctx.now()`, ...) at `cmd`'s position: record
        `output_json` there; nothing issued after it starts before it is durable."""
        ...

    def marker_pending(self, position: int) -> None:
        """A patch marker at `position` is to be recorded: nothing issued after it starts
        before it is durable."""
        ...

    def poison(self, error: BaseException) -> None:
        """The code did what cannot be replayed: the run goes no further (it fails)."""
        ...
