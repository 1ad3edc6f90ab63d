"""Sync workflows: a plain `def` workflow runs in a thread of its own, in lockstep with
the workflow loop.

The workflow loop (`_loop`) stays the only place where steps are issued and results
delivered. The run's main task there is `SyncDriver.main`: it starts the workflow's thread
and then blocks the worker's thread until the workflow either calls a step or returns.
A step call of the sync facade (`_syncsteps`) hands the loop a request (issue this step
and await it), then blocks its own thread; the main task issues the step on the workflow
loop, awaits it as async workflow code would, and hands the result back. So exactly one
of the two threads runs at any time: the workflow code sees one result at a time, in log
order, and replays exactly as an `async def` workflow that awaits its steps one by one.
That is also the limit: nothing runs concurrently (`ctx.gather` is refused; use
`start_workflow` handles, or write `async def`).

While the workflow code runs, the worker's loop waits for it, as it does for async
workflow code between two awaits: workflow code must not block (do slow work in steps).

When the execution ends with the thread waiting on a step (the run parked, was canceled,
lost its lease), `close()` wakes the thread with `WorkflowDetached`, a `BaseException`
that `except Exception` does not catch; any step call it makes afterwards raises it again.
The thread unwinds on its own (as an abandoned coroutine is closed), touching nothing.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..core.errors import WorkflowMisuseError

T = TypeVar("T")
log = logging.getLogger("durably.worker")
BLOCKED_S = 2.0  # workflow code running this long between two steps is reported
Outcome = tuple[Any, BaseException | None]


class WorkflowDetached(BaseException):
    """The execution let go of this sync workflow (it parked, ended or stopped): the
    workflow code is unwound and continues in a later claim, from its history."""


class SyncDriver:
    """Runs one sync workflow function for one execution (see the module)."""

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], name: str,
        on_misuse: Callable[[BaseException], object],
    ) -> None:  # fmt: skip
        self._fn = fn
        self.args = args  # what the function is called with (the context is made after)
        self._name = name
        self._on_misuse = on_misuse  # thread-safe: poisons the execution
        self._to_loop = threading.Semaphore(0)  # the workflow's thread gives the turn back
        self._to_thread = threading.Semaphore(0)  # the loop gives the turn to the thread
        self._request: Callable[[], Awaitable[Any]] | None = None
        self._reply: Outcome = (None, None)
        self._done: Outcome = (None, None)
        self._thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ loop side

    async def main(self) -> Any:
        """The run's main task on the workflow loop: serve the thread's step calls."""
        self._thread = threading.Thread(target=self._body, name=self._name, daemon=True)
        self._thread.start()
        self._turn_back()
        while self._request is not None:
            request, self._request = self._request, None
            try:
                self._reply = (await request(), None)
            except BaseException as exc:  # the workflow code's to handle, in its thread
                self._reply = (None, exc)
            self._to_thread.release()
            self._turn_back()
        value, error = self._done
        if error is not None:
            raise error
        return value

    def _turn_back(self) -> None:
        """Wait (blocking the worker's loop) for the workflow code to call a step or end;
        if it takes long, say where it is (the loop's own watchdog would show only this
        wait)."""
        waited = 0.0
        while not self._to_loop.acquire(timeout=BLOCKED_S):
            waited += BLOCKED_S
            frame = sys._current_frames().get(self._thread.ident or -1) if self._thread else None
            where = "".join(traceback.format_stack(frame, limit=4)) if frame else "?"
            log.warning("%s: sync workflow code has run for %.0fs without calling a step, and "
                        "the worker's loop waits for it (do slow work in steps). It is at:\n%s",
                        self._name, waited, where)  # fmt: skip

    def close(self) -> None:
        """The execution ended: a thread waiting on a step unwinds (`WorkflowDetached`)."""
        self._closed = True
        self._to_thread.release()

    # ------------------------------------------------------------------ thread side

    def call(self, request: Callable[[], Awaitable[T]], what: str) -> T:
        """From workflow code: run `request()` on the workflow loop, await it there, and
        return its result here."""
        if threading.current_thread() is not self._thread:
            error = WorkflowMisuseError(
                f"{what} was called outside the sync workflow's own thread (from a step "
                "body, or a thread of yours?); only the workflow's code can run steps"
            )
            if not self._closed:
                self._on_misuse(error)
            raise error
        if self._closed:
            raise WorkflowDetached(f"the execution of {self._name} has ended")
        self._request = request
        self._to_loop.release()
        self._to_thread.acquire()
        if self._closed:
            raise WorkflowDetached(f"the execution of {self._name} has ended")
        (value, failure), self._reply = self._reply, (None, None)
        if failure is not None:
            raise failure
        result: T = value
        return result

    def _body(self) -> None:
        try:
            value = self._fn(*self.args)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()
                raise WorkflowMisuseError(
                    "the workflow function is a plain `def` but returned an awaitable; "
                    "declare it `async def`"
                )
            self._done = (value, None)
        except WorkflowDetached:
            return
        except BaseException as exc:  # ends the run as an async workflow's would
            self._done = (None, exc)
        finally:
            self._request = None
            self._to_loop.release()


def is_sync_workflow(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is a plain function (a sync workflow); TypeError if it is neither."""
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn) or not callable(fn):
        raise TypeError(f"a workflow must be an `async def` or a plain `def` function, not {fn!r}")
    return not inspect.iscoroutinefunction(fn)
