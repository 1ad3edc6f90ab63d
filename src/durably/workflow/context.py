"""What workflow code is handed: `WorkflowContext`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NoReturn, TypeVar, overload

from . import values
from .continues import continue_as_new
from .patching import deprecate_patch, patched
from .steps import StepApi

T = TypeVar("T")
T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")
T6 = TypeVar("T6")


@dataclass(frozen=True)
class WorkflowContext:
    """Handed to a workflow function as its first argument.

    Workflow code runs on a deterministic loop of the engine's own: `asyncio.gather`,
    `asyncio.wait` and tasks replay exactly, timers and I/O are refused (use steps).

    Attributes:
        run_id: the run being executed.
        workflow: the workflow's name.
        version: the workflow's version.
        attempt: the workflow attempt (1 until a workflow-level retry).
        step: the durable step API (`run`, `sleep`, `wait_for_signal`, `transaction`,
            `run_workflow`, `start_workflow`, `send_signal`).
        input: the run's input, as the workflow's annotation types it.
        created_at: when the run was started (`start()`).
        started_at: when a worker first claimed it.

    All of it is read-only, and the same on every replay of the run. Read the time and
    randomness with `now()`, `random()` and `uuid4()`, which replay what they read first.
    """

    run_id: str
    workflow: str
    version: str
    attempt: int
    step: StepApi
    input: Any = None
    created_at: datetime | None = None
    started_at: datetime | None = None

    def patched(self, patch_id: str) -> Awaitable[bool]:
        """Whether this run takes the code path added by patch `patch_id`: True for a run
        that reaches this point for the first time (an old run too, once it gets here
        after the deploy), False when replaying history recorded before the patch.

        Example:
            ```python
            if await ctx.patched("new-copy"):
                await ctx.step.run("copy-v2", copy_v2, order)
            else:
                await ctx.step.run("copy", copy, order)
            ```
        """
        return patched(self.step, patch_id)

    def now(self) -> datetime:
        """The current time, recorded: a replay returns what the first execution read.

        Use it instead of `datetime.now()` in workflow code, which reads another time on
        replay. Like `random()` and `uuid4()`, it takes the workflow's next position, as a
        step does (kind "value", name "now"), and returns at once: the value is recorded
        behind the code, durable before anything issued after it starts (a step, a
        signal, the run's end), in the statement that records the results it followed.

        Returns:
            An aware `datetime` in UTC: the database's clock, as the worker estimates it
            (the skipped clock under `durably.testing`).

        Example:
            ```python
            due = ctx.now() + timedelta(days=3)
            await ctx.step.run("notify", notify, order, due.isoformat())
            ```
        """
        return values.now(self.step)

    def random(self) -> float:
        """A random number, recorded and replayed as `now()` is (name "random").

        Returns:
            A float in [0.0, 1.0), from the operating system's randomness.
        """
        return values.random(self.step)

    def uuid4(self) -> uuid.UUID:
        """A random UUID, recorded and replayed as `now()` is (name "uuid4").

        Returns:
            A version 4 `uuid.UUID`.

        Example:
            ```python
            key = str(ctx.uuid4())  # the same key each time the step runs
            await ctx.step.run("charge", charge, order, key)
            ```
        """
        return values.uuid4(self.step)

    def deprecate_patch(self, patch_id: str) -> Awaitable[None]:
        """Once no run takes the old path of `patch_id`: keep only the new code, call this
        where `patched(patch_id)` was, and runs that recorded the patch still replay. It
        takes effect at the call (awaiting it is allowed, not needed)."""
        return deprecate_patch(self.step, patch_id)

    def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this run (status `continued`, output `{"continued_as": NEW_RUN_ID}`) and
        start the next run of the same workflow and version with `input` and an empty
        history, in one transaction (SPEC §4.23). `handle.result()` of any run of the chain
        follows it to the last one's result. Steps still running are canceled, as at a
        return; signals buffered for this run move to the next one.

        Raises:
            ContinueAsNew: always (a `BaseException`: let it propagate).

        Example:
            ```python
            @app.workflow(name="poll", version="v1")
            async def poll(ctx: WorkflowContext, seen: int) -> int:
                seen += await ctx.step.run("fetch", fetch_new)
                if seen < 1000:
                    ctx.continue_as_new(seen)  # history stays small, however long it runs
                return seen
            ```
        """
        continue_as_new(input)

    # Typed as `asyncio.gather` is: a tuple per position for up to six awaitables, a
    # list of one type for more (the value is a list either way, as asyncio's is).
    @overload
    async def gather(
        self, a1: Awaitable[T1], /, *, return_exceptions: Literal[False] = False
    ) -> tuple[T1]: ...

    @overload
    async def gather(
        self, a1: Awaitable[T1], a2: Awaitable[T2], /, *,
        return_exceptions: Literal[False] = False,
    ) -> tuple[T1, T2]: ...  # fmt: skip

    @overload
    async def gather(
        self, a1: Awaitable[T1], a2: Awaitable[T2], a3: Awaitable[T3], /, *,
        return_exceptions: Literal[False] = False,
    ) -> tuple[T1, T2, T3]: ...  # fmt: skip

    @overload
    async def gather(
        self, a1: Awaitable[T1], a2: Awaitable[T2], a3: Awaitable[T3], a4: Awaitable[T4], /, *,
        return_exceptions: Literal[False] = False,
    ) -> tuple[T1, T2, T3, T4]: ...  # fmt: skip

    @overload
    async def gather(
        self, a1: Awaitable[T1], a2: Awaitable[T2], a3: Awaitable[T3], a4: Awaitable[T4],
        a5: Awaitable[T5], /, *, return_exceptions: Literal[False] = False,
    ) -> tuple[T1, T2, T3, T4, T5]: ...  # fmt: skip

    @overload
    async def gather(
        self, a1: Awaitable[T1], a2: Awaitable[T2], a3: Awaitable[T3], a4: Awaitable[T4],
        a5: Awaitable[T5], a6: Awaitable[T6], /, *, return_exceptions: Literal[False] = False,
    ) -> tuple[T1, T2, T3, T4, T5, T6]: ...  # fmt: skip

    @overload
    async def gather(
        self, *aws: Awaitable[T], return_exceptions: Literal[False] = False
    ) -> list[T]: ...

    @overload
    async def gather(
        self, *aws: Awaitable[T], return_exceptions: Literal[True]
    ) -> list[T | BaseException]: ...

    async def gather(self, *aws: Awaitable[Any], return_exceptions: bool = False) -> Any:
        """Await steps (or branches of steps) concurrently; their results in order.

        Example:
            ```python
            sub, size = await ctx.gather(ctx.step.run("submit", submit, order),
                                         ctx.step.run("measure", measure, order))
            ```

        Type checkers see a tuple with each awaitable's type for up to six of them and a
        `list[T]` for more; at run time it is a list, as `asyncio.gather`'s is.
        """
        return list(await asyncio.gather(*aws, return_exceptions=return_exceptions))

    async def wait_first(self, *aws: Awaitable[T]) -> tuple[int, T]:
        """Wait for the first of `aws` to finish: (its index, its result).

        "First" is the first in the run's log, so a replay picks the same one. The others
        stop being awaited (steps already running still finish and are recorded).
        """
        tasks = [asyncio.ensure_future(aw) for aw in aws]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        index = next(i for i, task in enumerate(tasks) if task in done)
        return index, tasks[index].result()
