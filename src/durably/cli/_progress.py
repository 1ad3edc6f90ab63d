"""What `durably start --wait` prints to stderr while it waits: the run's status as it
changes, each step attempt as it ends, each event as it is set (stdout keeps the result)."""

from __future__ import annotations

import json
from typing import Any

import typer

from ..client.durably import Durably
from ..store.endwatch import Waiter
from ..store.models import Run

POLL_S = 0.25


def _say(text: str) -> None:
    typer.echo(text, err=True)


async def wait_with_progress(durably: Durably, run_id: str) -> Run:
    """Read the run every `POLL_S` until it is done, reporting what changed, and at once
    when it ends (woken as `RunHandle.wait` is); the run."""
    async with durably.end_watch.watching(run_id) as end:
        return await _report(durably, run_id, end)


async def _report(durably: Durably, run_id: str, end: Waiter) -> Run:
    status = ""
    ended: set[tuple[int, int]] = set()
    events: dict[str, Any] = {}
    while True:
        run = await durably.get_run(run_id)
        if run.status != status:
            status = run.status
            waiting = f" for {run.waiting_for}" if run.waiting_for else ""
            _say(f"run {run_id}: {status}{waiting}")
        for step in await durably.list_steps(run_id):
            key = (step.position, step.attempt)
            if step.status != "running" and key not in ended:
                ended.add(key)
                error = step.error or {}
                why = f": {error.get('type')}: {error.get('message')}" if error else ""
                _say(f"  step {step.step!r} ({step.kind}) attempt {step.attempt} "
                     f"{step.status}{why}")  # fmt: skip
        for name, value in (await durably.list_events(run_id)).items():
            if name not in events or events[name] != value:
                events[name] = value
                _say(f"  event {name} = {json.dumps(value, default=str, sort_keys=True)[:200]}")
        if run.done:
            return run
        await end.wait(POLL_S)
