"""Deadlines, all stretched by one factor, and waiting on conditions (never a bare sleep).

Every deadline in the tests is written as it would be on an idle machine, and stretched by
`SLOW`, read from `DURABLY_TEST_SLOWNESS` (default 1; `.ci/run` sets 3). A loaded machine
needs more time, not other numbers scattered through the files.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

if TYPE_CHECKING:
    from durably import Durably

T = TypeVar("T")


def _slowness() -> float:
    raw = os.environ.get("DURABLY_TEST_SLOWNESS", "1")
    try:
        factor = float(raw)
    except ValueError:
        factor = 0.0
    if not factor > 0:
        raise RuntimeError(f"DURABLY_TEST_SLOWNESS must be a positive number, not {raw!r}")
    return factor


SLOW = _slowness()


def scaled(seconds: float) -> float:
    """A deadline of `seconds` on an idle machine, stretched by DURABLY_TEST_SLOWNESS."""
    return seconds * SLOW


def duration(seconds: float) -> str:
    """`scaled(seconds)` as a duration for the engine or a worker flag: "0.9s"."""
    return f"{scaled(seconds):g}s"


async def eventually(
    check: Callable[[], Awaitable[Any] | Any], timeout: float = 10.0, what: str = "condition"
) -> Any:
    """Poll `check` until it returns something truthy; that value.

    Fails after `scaled(timeout)` seconds: `timeout` is what an idle machine needs.
    """
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {limit:g}s waiting for {what} (last: {last!r})")


def eventually_sync(
    check: Callable[[], Any], timeout: float = 10.0, what: str = "condition"
) -> Any:
    """`eventually` for plain functions: polls `check` for up to `scaled(timeout)` seconds."""
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {limit:g}s waiting for {what} (last: {last!r})")


def tail(path: Path, lines: int = 40, drop: str | None = None) -> str:
    """The last `lines` lines of a log (less those containing `drop`) under a header
    naming it, or that it does not exist."""
    if not path.exists():
        return f"== {path}: does not exist =="
    text = [t for t in path.read_text(errors="replace").splitlines()
            if drop is None or drop not in t]  # fmt: skip
    return "\n".join([f"== {path} (last {min(lines, len(text))} of {len(text)} lines) ==",
                      *text[-lines:]])  # fmt: skip


def let_go(log: str, run_id: str = "") -> bool:
    """Whether a worker's `log` shows it let go of a run (`run_id`, or any) on losing its
    lease. Which comes first is a race: its lease check cancels the step bodies, or the
    engine refuses to record the result of a step that ended meanwhile."""
    return any(
        f"run {run_id}" in line
        and ("cancelling its step bodies" in line or "lost the lease on run" in line)
        for line in log.splitlines()
    )


def freeze_outside_a_write(proc: subprocess.Popen[Any], url: str) -> None:
    """SIGSTOP `proc` at a moment it holds no SQLite write lock.

    A process frozen inside a write transaction holds SQLite's file lock, which no other
    process can break (PostgreSQL has no such limit: its locks belong to the server). The
    case tested here is a worker frozen in its step body, so freeze it again if it was
    caught in the middle of one of its few, short writes.
    """
    for _ in range(50):
        os.killpg(proc.pid, signal.SIGSTOP)
        if not url.startswith("sqlite"):
            return
        probe = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.01)  # let it finish that write before freezing it again
        finally:
            probe.close()
    raise AssertionError("could not freeze the worker outside a write")


def run_command(module: str, args: tuple[str, ...], env: dict[str, str], cwd: Any,
                check: bool, timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`python -m module args...`; with `check`, a non-zero exit fails with its output.

    `timeout` is for an idle machine (see `scaled`); on expiry the command is killed.
    """
    done = subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd, text=True,
                          capture_output=True, timeout=scaled(timeout))  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(f"{module} {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")  # fmt: skip
    return done


class AppThread:
    """An app and a worker on an event loop of their own, in a thread, for a whole test:
    hypothesis runs each example as a plain call (`run`), which a pytest-asyncio test
    cannot (its loop is the test's)."""

    def __init__(self, app: Durably, concurrency: int = 4) -> None:
        self.app = app
        self._concurrency = concurrency
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.app, self.app.worker(concurrency=self._concurrency):
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> Self:
        self._thread.start()
        assert self._ready.wait(scaled(30)), "the engine did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(scaled(30))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro`'s result, run on the app's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(scaled(60))
