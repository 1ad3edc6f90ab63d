"""A program that embeds a worker in its own event loop (no `durably worker`), and user
code that keeps the main thread busy, so a Ctrl-C arrives while it runs.

Run as `python -m tests.apps.embedded MODE`: `asyncio.run` runs `async with
app.worker()` (asyncio's runner owns SIGINT: the first cancels the main task, the second
raises KeyboardInterrupt), or `loop` runs `worker.run(install_signals=False)` with
`loop.run_until_complete` (Python's default handler raises KeyboardInterrupt). Configured by
environment: DURABLY_DATABASE_URL; SPIN_MARK, a file written when user code starts to spin;
SPIN_RELEASE, a file whose existence ends the spin.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

from durably import Durably, StepContext, WorkflowContext

app = Durably(os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db"))


def _spinning(run_id: str, what: str) -> None:
    with open(os.environ["SPIN_MARK"], "a") as out:
        out.write(f"{run_id} {what}\n")


def _released() -> bool:
    return os.path.exists(os.environ["SPIN_RELEASE"])


def _busy(seconds: float) -> None:
    """Python code running on the main thread, no await, no thread: where a signal lands."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def spin_body(ctx: StepContext) -> str:
    """Busy until released, letting the worker's loop run every 50 ms (a drain can start)."""
    _spinning(ctx.run_id, "body")
    while not _released():
        _busy(0.05)
        await asyncio.sleep(0)
    return "spun"


@app.workflow(name="spin-body", version="v1")
async def spin_in_body(ctx: WorkflowContext) -> str:
    return await ctx.step.run("spin", spin_body)


@app.workflow(name="spin-flow", version="v1")
async def spin_in_flow(ctx: WorkflowContext) -> str:
    """Busy in workflow code until released (the worker's loop waits meanwhile)."""
    _spinning(ctx.run_id, "flow")
    while not _released():
        _busy(0.05)
    return "spun"


async def _with_worker() -> None:
    async with app.worker(lease="2s", heartbeat="0.5s", shutdown_grace="60s"):
        await asyncio.Event().wait()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    # Python's own Ctrl-C handling, as in a terminal: a process started from a shell's
    # background job inherits SIGINT ignored (bash without job control), and Python then
    # installs no handler; every Ctrl-C of the test would be lost.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.argv[1] == "asyncio.run":
        asyncio.run(_with_worker())
    else:
        loop = asyncio.new_event_loop()
        worker = app.worker(lease="2s", heartbeat="0.5s", shutdown_grace="60s")
        loop.run_until_complete(worker.run(install_signals=False))
