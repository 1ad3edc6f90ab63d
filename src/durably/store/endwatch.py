"""Waiting for runs to end (`RunHandle.wait`): woken by the end itself instead of polling
the run's row, through one listening connection per app, however many wait. Waiting for a
run's event (`app.get_event`) goes through the same connection (`watching_events`).

A waiter subscribes, marks its run awaited, then reads its run, then waits to be woken and
reads it again. An end that commits after the mark is announced by the statement that ends
the run (PostgreSQL: `ended:<id>` from finish_run and finish_many, only for a run marked
awaited, see `await_runs`; `cancel:<id>` from a cancel; SQLite: every end, through
`notify_local`, in this process); one that committed before is in the read.

The marks of the waiters that come together are one statement (`await_runs`). A mark that
finds the run ended (or missing) marks nothing: the read says so, and if it does not (the run
was resumed in between) the waiter marks it again before it waits. SQLite does not mark:
its messages are function calls in this process, and a mark would be a write, under its
one writer lock, for nothing.

What no message names is checked for every waiter at once, by one query (`ended_runs`)
that wakes those whose run has ended:

- the listener is listening, at first and after a reconnect (`LISTENING`): what was sent
  before is lost, and a waiter's first read may come before the first LISTEN;
- SQLite saw a commit (`changed`): another process may have ended a run;
- every `SAFETY_POLL_S`, in case the listening connection is gone without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from ..backends import LISTENING, Connector

# A listening connection may be gone without a word, or never hear anything (behind a
# pooler in transaction mode): waiters are then up to this late. One query checks them all.
SAFETY_POLL_S = 1.0

StopListening = Callable[[], Awaitable[None]]

log = logging.getLogger("durably.client")


class EndWatch:
    """The waiters of one app and their listening connection, opened by the first waiter
    and closed by `Durably.close()`."""

    def __init__(self, db: Connector, channel: str) -> None:
        self._db = db
        self._channel = channel
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._event_waiters: dict[str, set[asyncio.Event]] = {}
        self._marks = db.dialect == "postgresql"  # see the module's docstring
        self._unmarked: set[str] = set()  # to mark with the next statement, as one batch
        self._batch: asyncio.Future[set[str]] | None = None  # that batch's marked runs
        self._marker: asyncio.Task[None] | None = None
        self._mark_refused = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: asyncio.Task[StopListening] | None = None
        self._poller: asyncio.Task[None] | None = None
        self._checker: asyncio.Task[None] | None = None
        self._check_again = False

    @contextlib.asynccontextmanager
    async def watching_events(self, run_id: str) -> AsyncIterator[asyncio.Event]:
        """Set when run `run_id` may have set an event (`app.get_event`), through the same
        listening connection (an `event:<id>` message, or any the listener may have missed):
        read the events after entering, and after each wake-up; clear it before waiting."""
        with _subscribed(self._event_waiters, run_id) as changed:
            await self.listen()
            yield changed

    @contextlib.asynccontextmanager
    async def watching(self, run_id: str) -> AsyncIterator[Waiter]:
        """Subscribed to run `run_id`'s end: read the run after entering, not before."""
        with _subscribed(self._waiters, run_id) as woken:
            await self.listen()
            waiter = Waiter(self, run_id, woken)
            await waiter.mark()
            yield waiter

    async def close(self) -> None:
        """Stop listening. A waiter still waiting reads its run again, and listens anew
        if it waits on (as the app reconnects when used after `close()`)."""
        listener = self._listener
        tasks = [t for t in (self._poller, self._checker, self._marker) if t]
        self._listener = self._poller = self._checker = self._marker = None
        if self._loop is asyncio.get_running_loop():
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._unmarked, batch, self._batch = set(), self._batch, None
            if batch is not None and not batch.done():  # its marker never started
                batch.set_result(set())
            if listener is not None:
                await asyncio.wait([listener])  # starting still: it is quick
                if not _failed(listener):
                    await listener.result()()
        self._wake(list(self._waiters))

    async def listen(self) -> None:
        """Listen, if not yet: the first waiters await the same start."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # tasks left on a loop that has ended are gone with it
            self._loop, self._listener, self._poller, self._checker = loop, None, None, None
            self._marker, self._batch, self._unmarked = None, None, set()
        if self._listener is None or _failed(self._listener):
            listening = self._db.listen(self._on_message)
            self._listener = asyncio.create_task(listening, name="durably-end-listen")
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="durably-end-poll")
        # Shielded: the first waiters share the start, and one that gives up (its timeout)
        # must not cancel it for the others.
        await asyncio.shield(self._listener)

    async def mark(self, run_id: str) -> bool:
        """Mark run `run_id` awaited (see `await_runs`), in one statement with the runs of
        the waiters that come meanwhile. False: it has ended or does not exist (read it)."""
        if not self._marks:
            return True
        self._unmarked.add(run_id)
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
        batch = self._batch
        if self._marker is None or self._marker.done():
            self._marker = asyncio.create_task(self._mark(), name="durably-end-mark")
        return run_id in await asyncio.shield(batch)

    async def _mark(self) -> None:
        while self._unmarked and self._batch is not None:
            ids, batch = sorted(self._unmarked), self._batch
            self._unmarked, self._batch = set(), None
            try:
                rows = await self._db.fetch("await_runs", ids=ids, channel=self._channel)
            except asyncio.CancelledError:
                batch.set_result(set())  # not marked: each reads its run, marks it again
                raise
            except Exception as exc:
                # Say marked: each waiter reads its run (and meets the error there if it
                # lasts), then waits for the safety poll. A role that may read runs but not
                # write them waits so, and is told once.
                if not self._mark_refused:
                    self._mark_refused = True
                    log.warning("could not mark runs awaited (%s): waiters learn of their "
                                "end by a check every %g s", exc, SAFETY_POLL_S)  # fmt: skip
                batch.set_result(set(ids))
            else:
                batch.set_result({row["id"] for row in rows})

    def _on_message(self, message: str) -> None:
        kind, _, run_id = message.partition(":")
        if kind in ("ended", "cancel"):  # a cancel may end the run at once
            self._wake([run_id])
        elif kind in ("event", "stream"):  # a stream's reader waits as get_event does
            for changed in self._event_waiters.get(run_id, ()):
                changed.set()
        elif message in (LISTENING, "changed"):
            self._check_soon()
            for waiters in self._event_waiters.values():  # each reads its run's events
                for changed in waiters:
                    changed.set()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(SAFETY_POLL_S)
            self._check_soon()

    def _check_soon(self) -> None:
        """Check the waiters' runs; asked for while a check runs, once more after it."""
        if not self._waiters:
            return
        self._check_again = True
        if self._checker is None or self._checker.done():
            self._checker = asyncio.create_task(self._check(), name="durably-end-check")

    async def _check(self) -> None:
        while self._check_again:
            self._check_again = False
            run_ids = sorted(self._waiters)
            if not run_ids:
                return
            try:
                rows = await self._db.fetch("ended_runs", ids=run_ids)
            except Exception:
                # Each waiter reads its run itself, and meets the error there if it lasts.
                self._wake(run_ids)
            else:
                self._wake([row["id"] for row in rows])

    def _wake(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            for woken in self._waiters.get(run_id, ()):
                woken.set()


def _failed(task: asyncio.Task[StopListening]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


@contextlib.contextmanager
def _subscribed(waiters: dict[str, set[asyncio.Event]], run_id: str) -> Iterator[asyncio.Event]:
    """An event of `run_id`'s among `waiters`, for as long as the block lasts."""
    event = asyncio.Event()
    waiters.setdefault(run_id, set()).add(event)
    try:
        yield event
    finally:
        mine = waiters.get(run_id, set())
        mine.discard(event)
        if not mine:
            waiters.pop(run_id, None)


class Waiter:
    """One waiter's wake-ups (`EndWatch.watching`)."""

    def __init__(self, watch: EndWatch, run_id: str, woken: asyncio.Event) -> None:
        self._watch = watch
        self._run_id = run_id
        self._woken = woken
        self._marked = False

    async def mark(self) -> None:
        """Mark the run awaited (`EndWatch.mark`), before relying on being told of its end."""
        self._marked = await self._watch.mark(self._run_id)

    async def wait(self, timeout: float | None) -> None:
        """Until the run may have ended, or `timeout` seconds have passed (None: no limit).
        Read the run after it: a wake-up that came since the last read returns at once."""
        await self._watch.listen()  # again, after a `close()` that this waiter outlived
        if not self._marked:
            # The mark found the run ended (or missing), the read since did not: it was
            # resumed in between. Marked now, it is told; else it is to be read again.
            await self.mark()
            if not self._marked:
                return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._woken.wait()
        self._woken.clear()
