"""The client API for code without an event loop (scripts, Django or Flask views).

Each method runs the async method of the same name on a private event loop in a
background thread; the signatures and documentation are the async ones, not a copy.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

from .app import App
from .handle import RunHandle
from .streams import blocking_stream

if TYPE_CHECKING:
    from ..store.models import Run

P = ParamSpec("P")
T = TypeVar("T")


def _blocking(
    method: Callable[Concatenate[App, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SyncDurably, P], T]:
    def call(self: SyncDurably, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(method(self.app, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call


class SyncDurably:
    """`app.sync`: start, signal, cancel and query without `await`.

    Example:
        ```python
        run_id = app.sync.start("acquire", {"id": "d1"}).run_id
        app.sync.send_signal("download-done:d1", {"ok": True})
        ```
    """

    _lock = threading.Lock()
    _loops: ClassVar[dict[int, asyncio.AbstractEventLoop]] = {}

    def __init__(self, app: App) -> None:
        self.app = app
        with self._lock:
            loop = self._loops.get(id(app))
            if loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="durably-sync", daemon=True)
                thread.start()
                self._loops[id(app)] = loop
                atexit.register(_shut_down, app, loop, thread)
        self._loop = loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of the app on the facade's loop; its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    start = _blocking(App.start)
    send_signal = _blocking(App.send_signal)
    cancel = _blocking(App.cancel)
    get_run = _blocking(App.get_run)
    list_runs = _blocking(App.list_runs)
    list_steps = _blocking(App.list_steps)
    migrate = _blocking(App.migrate)
    resume = _blocking(App.resume)
    fork = _blocking(App.fork)
    purge = _blocking(App.purge)
    list_signals = _blocking(App.list_signals)
    delete_signal = _blocking(App.delete_signal)
    get_event = _blocking(App.get_event)
    list_events = _blocking(App.list_events)
    request = _blocking(App.request)
    send_request = _blocking(App.send_request)
    get_reply = _blocking(App.get_reply)
    close = _blocking(App.close)

    def result(self, run_id: str, timeout: float | None = None) -> Any:
        """Wait for a run to finish; its output (see `RunHandle.result`)."""
        return self.run(RunHandle(self.app, run_id).result(timeout))

    def read_stream(self, run_id: str, key: str, offset: int = 0) -> Iterator[Any]:
        """The values of run `run_id`'s stream `key`, as `Durably.read_stream`, blocking."""
        return blocking_stream(self.run, self.app.read_stream(run_id, key, offset))

    list_streams = _blocking(App.list_streams)

    def wait(self, run_id: str, timeout: float | None = None) -> Run:
        """Wait for a run to finish; the run (see `RunHandle.wait`)."""
        return self.run(RunHandle(self.app, run_id).wait(timeout))


def _shut_down(app: App, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """At exit: close the app's connections and end the facade's loop, so a script that
    never called `close()` leaves no pending task behind (no "Task was destroyed")."""

    async def finish() -> None:
        with contextlib.suppress(Exception):
            await app.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    if loop.is_closed() or not thread.is_alive():
        return
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    if not thread.is_alive():
        loop.close()
