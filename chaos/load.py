"""The load generator: it keeps starting runs of the mixed workload (`chaos.plans`) through
the faults. Every start carries an idempotency key, and so do half the signals, so a call
retried through a database outage is never doubled by the soak itself; the other half are
plain sends, looked for among the stored signals before they are sent again (`_send`)."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from durably import DatabaseUnavailable, Durably, RunTerminalError, WorkflowTimeoutError

from .plans import Plan, make_plan

# ------------------------------------------------------------------ the load generator


class LoadGenerator:
    """Keeps starting runs from random plans, sends their signals, cancels some.

    Args:
        client: the app the calls go through.
        rng: the soak's random source (the seed makes the plans reproducible).
        in_flight: the most runs not yet finished at once.
        rate: the most starts a second.
        plant: a planted fault (`workload.PLANTS`), or "".
    """

    def __init__(
        self, client: Durably, rng: random.Random, in_flight: int, rate: float, plant: str = ""
    ) -> None:
        self.client = client
        self.rng = rng
        self.in_flight = in_flight
        self.rate = rate
        self.plant = plant
        self.plans: dict[str, Plan] = {}
        self.retried = 0  # client calls retried through an outage
        self._tasks: set[asyncio.Task[None]] = set()
        self._planted = False

    async def run(self, stop: asyncio.Event) -> None:
        """Start runs until `stop` is set."""
        while not stop.is_set():
            if len(self._tasks) >= self.in_flight:
                await asyncio.sleep(0.05)
                continue
            plan = make_plan(self.rng, len(self.plans))
            self.plans[plan.key] = plan
            task = asyncio.create_task(self._drive(plan), name=f"drive-{plan.key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            await asyncio.sleep(1 / self.rate)

    async def drain(self, timeout: float) -> int:
        """Wait for every started run to finish; the number still unfinished at `timeout`."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        left = list(self._tasks)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        return len(left)

    async def _retry(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """`await call(*args, **kwargs)`, again while the database is unavailable."""
        outage = _Outage(self)
        while True:
            try:
                return await call(*args, **kwargs)
            except DatabaseUnavailable as exc:
                await outage.pause(exc)

    async def _drive(self, plan: Plan) -> None:
        try:
            await self._drive_plan(plan)
        except Exception as exc:  # reported as a violation, the soak goes on
            plan.driver_error = f"{type(exc).__name__}: {exc}"

    async def _drive_plan(self, plan: Plan) -> None:
        app_ = self.client
        if plan.signals:  # the first signal is sent before the run starts: buffered
            key, data = plan.signals[0]
            plan.sent.append(await self._send(data, key))
            if (self.plant == "double-signal" and not self._planted and key is not None
                    and plan.cancel_after is None):  # fmt: skip
                self._planted = True  # planted: the same signal delivered a second time
                await self._send(data, f"{key}+")
        deadline = None
        if plan.deadline_s is not None:
            deadline = datetime.now(UTC) + timedelta(seconds=plan.deadline_s)
        wf = app_.get_workflow(plan.workflow)
        handle = await self._retry(wf.start, plan.spec, idempotency_key=plan.key,
                                   deadline_at=deadline)  # fmt: skip
        plan.run_id = handle.run_id
        began = time.monotonic()
        if len(plan.signals) > 1:
            if plan.signal_after_wait:  # the second one reaches a waiting run
                await self._until(plan, lambda status: status != "pending" and status != "running")
            key, data = plan.signals[1]
            plan.sent.append(await self._send(data, key))
        if plan.workflow == "chaos-requests":
            await self._ask(plan, began)
        elif plan.workflow == "chaos-stream":
            await self._follow(plan, began)
        elif plan.cancel_after is not None:
            await asyncio.sleep(max(0.0, began + plan.cancel_after - time.monotonic()))
            await self._cancel(plan)
        await self._until(plan, None)

    async def _ask(self, plan: Plan, began: float) -> None:
        """Two requests, each asked again through an outage or a timeout with its key (the
        key delivers it once and returns its one answer); a cancel races them."""
        assert plan.run_id is not None
        canceling = None
        if plan.cancel_after is not None:
            canceling = asyncio.create_task(self._cancel_at(plan, began))
        try:
            for n in (1, 2):
                while True:
                    try:
                        plan.answers.append(await self._retry(
                            self.client.request, plan.run_id, "ask", {"n": n},
                            idempotency_key=f"{plan.key}:r{n}", timeout="20s",
                        ))  # fmt: skip
                        break
                    except WorkflowTimeoutError:
                        continue
        except RunTerminalError:
            pass  # canceled (or ended by its deadline) before it answered
        finally:
            if canceling is not None:
                await canceling

    async def _follow(self, plan: Plan, began: float) -> None:
        """Read the run's stream to its close, from where the last read stopped whenever
        the database goes away (a reader loses nothing and sees each value once); a cancel
        races it (the run's end closes the stream)."""
        assert plan.run_id is not None
        canceling = None
        if plan.cancel_after is not None:
            canceling = asyncio.create_task(self._cancel_at(plan, began))
        outage = _Outage(self)
        try:
            while True:
                offset = len(plan.read)
                if self.plant == "stream-reread" and not self._planted and offset:
                    self._planted, offset = True, 0  # planted: it lost its place
                try:
                    async for value in self.client.read_stream(plan.run_id, "s", offset):
                        plan.read.append(value)
                        if self.plant == "stream-reread" and not self._planted:
                            break  # planted: cut after the first value
                    else:
                        return
                except DatabaseUnavailable as exc:
                    await outage.pause(exc)
        finally:
            if canceling is not None:
                await canceling

    async def _cancel_at(self, plan: Plan, began: float) -> None:
        assert plan.cancel_after is not None
        await asyncio.sleep(max(0.0, began + plan.cancel_after - time.monotonic()))
        await self._cancel(plan)

    async def _send(self, data: dict[str, Any], key: str | None) -> dict[str, Any]:
        """Send once. A keyed send is simply sent again through an outage (the key makes it
        once); a plain one whose reply was lost may have been stored: it is looked for
        among the topic's signals before it is sent again, as a careful client would."""
        topic = data["topic"]
        if key is not None:
            sent: dict[str, Any] = await self._retry(
                self.client.send_signal, topic, data, idempotency_key=key
            )
            return sent
        outage = _Outage(self)  # one give-up for the sends and the look-ups
        maybe_sent = False  # a send failed: it may have been stored all the same
        while True:
            try:
                if maybe_sent:
                    stored = await self.client.list_signals(topic, pending=False)
                    if any(s["data"] == data for s in stored):
                        return {"delivered_to": [], "buffered": False, "duplicate": False,
                                "found": True}  # fmt: skip
                sent = await self.client.send_signal(topic, data)
                return sent
            except DatabaseUnavailable as exc:
                maybe_sent = True
                await outage.pause(exc)

    async def _until(self, plan: Plan, status_ok: Any) -> None:
        """Poll the run until `status_ok(status)` (None: until it is done)."""
        assert plan.run_id is not None
        while True:
            try:
                run = await self.client.get_run(plan.run_id)
                if run.done or (status_ok is not None and status_ok(run.status)):
                    return
            except DatabaseUnavailable:
                self.retried += 1
            await asyncio.sleep(0.5 if status_ok else 1.0)

    async def _cancel(self, plan: Plan) -> None:
        assert plan.run_id is not None
        doubt = False  # a cancel whose reply was lost may have canceled the run
        while True:
            try:
                await self.client.cancel(plan.run_id)
                plan.cancel, plan.canceled_at = "canceled", time.time()
                return
            except RunTerminalError:
                plan.cancel = "uncertain" if doubt else "refused"
                return
            except DatabaseUnavailable:
                doubt = True
                self.retried += 1
                await asyncio.sleep(0.5)


class _Outage:
    """Pauses between tries of one call through a database outage, 0.2 s doubling to 2 s,
    each counted as a retried call; the error again once 180 s have passed."""

    def __init__(self, load: LoadGenerator) -> None:
        self._load = load
        self._pause = 0.2
        self._give_up = time.monotonic() + 180

    async def pause(self, error: DatabaseUnavailable) -> None:
        if time.monotonic() > self._give_up:
            raise error
        self._load.retried += 1
        await asyncio.sleep(self._pause)
        self._pause = min(self._pause * 2, 2.0)
