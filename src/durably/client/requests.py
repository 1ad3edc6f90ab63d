"""The client's half of requests (SPEC §4.22): `app.request` sends one to a run and waits
for its answer; `app.get_reply` reads (or waits for) the answer of one sent before.

The wait is woken by the answer itself: the `reply` step's NOTIFY on PostgreSQL, a commit
seen by the data-version poll on SQLite, through the app's one listening connection
(`EndWatch.watching_events`); a check every second covers a lost connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ..core.codec import encode
from ..core.durations import Duration, parse_duration
from ..core.errors import RequestRejected, RequestTimeout, RunTerminalError
from ..store.endwatch import SAFETY_POLL_S, EndWatch
from ..store.requests import Answer
from ..store.sends import check_signal_name
from ..store.store import Store
from .operating import Operated


class Requesting:
    """Requests sent through the app's store, their answers awaited on its `end_watch`."""

    def __init__(self, app: Operated, store: Store, end_watch: EndWatch, max_payload: int):
        self.app = app
        self.store = store
        self.end_watch = end_watch
        self.max_payload = max_payload

    async def send(
        self, run_id: str, name: str, data: Any = None, *, idempotency_key: str | None = None
    ) -> str:
        """Send run `run_id` request `name` without waiting; its id, for `get_reply`."""
        check_signal_name(name)
        data_json = encode(
            data, f"the data of request {name!r}", self.max_payload, self.store.codec
        )
        await self.app.open()
        request_id, _ = await self.store.requests.send(run_id, name, data_json, idempotency_key)
        return request_id

    async def request(
        self, run_id: str, name: str, data: Any = None, *, timeout: Duration | None = "30s",
        idempotency_key: str | None = None,
    ) -> Any:  # fmt: skip
        """Send run `run_id` a durable request `name` and wait for its answer (SPEC §4.22;
        the workflow takes it with `ctx.step.wait_for_request(name)`).

        Raises:
            RequestRejected: the workflow rejected it (`.reason`).
            WorkflowTimeoutError: no answer within `timeout` (None: wait for ever); the
                request stays pending (`.request_id`: `get_reply` reads a later answer).
            RunTerminalError: the run has finished (nothing was sent), or it ended
                without answering (the request stays pending). RunNotFound.
        """
        limit = _seconds(timeout)  # an InvalidDuration before anything is sent
        request_id = await self.send(run_id, name, data, idempotency_key=idempotency_key)
        return await self._answer(request_id, run_id, limit)

    async def get_reply(self, request_id: str, timeout: Duration | None = 0) -> Any:
        """The answer to request `request_id` (RequestRejected if rejected), waiting up to
        `timeout` for it (WorkflowTimeoutError while it stays pending)."""
        await self.app.open()
        found = await self.store.requests.get(request_id)
        if found.status != "pending":
            return _outcome(found)
        return await self._answer(request_id, found.run_id, _seconds(timeout))

    async def _answer(self, request_id: str, run_id: str, limit: float | None) -> Any:
        """The answer to `request_id`, waited for at most `limit` seconds (RequestTimeout).
        The request's run is read from it each time: one that continues as new hands its
        unanswered requests to the next run of its chain, whose events are then watched."""
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            moved = await self._answer_on(request_id, run_id, deadline, limit)
            if not isinstance(moved, _Moved):
                return moved
            run_id = moved.run_id

    async def _answer_on(
        self, request_id: str, run_id: str, deadline: float | None, limit: float | None
    ) -> Any:
        ended = None  # the run's status, once it is seen finished
        async with self.end_watch.watching_events(run_id) as changed:
            while True:
                found = await self.store.requests.get(request_id)
                if found.status != "pending":
                    return _outcome(found)
                if found.run_id != run_id:
                    return _Moved(found.run_id)
                if ended is not None:  # read before the request: it never answered
                    raise RunTerminalError(run_id, ended, f"answer request {request_id} of")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RequestTimeout(request_id, (
                        f"request {request_id} ({found.name!r} to run {run_id}) had no answer "
                        f"within {limit:g}s; it stays pending: app.get_reply({request_id!r}) "
                        "reads the answer that comes later"
                    ))  # fmt: skip
                changed.clear()
                wait = SAFETY_POLL_S if left is None else min(left, SAFETY_POLL_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), wait)
                # A run that ended without answering (canceled, failed) never will, unless
                # resumed: the request stays pending for `get_reply`.
                run = await self.store.get_run(run_id)
                ended = run.status if run.terminal else None


class _Moved:
    """The request is now that of run `run_id` (its run continued as new)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id


def _outcome(found: Answer) -> Any:
    if found.status == "rejected":
        raise RequestRejected(found.reason or "rejected", found.request_id)
    return found.answer


def _seconds(timeout: Duration | None) -> float | None:
    return parse_duration(timeout).total_seconds() if timeout is not None else None
