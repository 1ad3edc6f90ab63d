"""Fixtures of the dashboard tests: the dashboard served in the test's process (`serving`)
or as a real `durably dashboard` process (`Board`), and Debian's Chromium driven by
Playwright."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from durably import Durably
from durably.dashboard import Dashboard
from durably.web.guard import HostAllowList
from durably.web.server import Server, bind, config
from tests.helpers import eventually_sync, scaled, tail
from tests.processes import Processes

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (apt-get install chromium)",
)


@contextlib.contextmanager
def serving(app: Durably, token: str = "t0ken") -> Iterator[str]:
    """The dashboard of `app` served by uvicorn on a free port of 127.0.0.1, its base URL.
    It runs on the loop of `app.sync`: the test's `app.sync` calls and the pages share
    one app (and its pool), as they shared one with the server of the standard library.
    (The socket listens before uvicorn starts: a first request waits for it.)"""
    board = Dashboard(app, token)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    asgi = board.asgi(HostAllowList.of("127.0.0.1", port))
    server = Server(config(asgi), [board.streams.close])

    async def start() -> asyncio.Task[None]:
        return asyncio.create_task(server.serve(sockets=[sock]))

    async def stop(task: asyncio.Task[None]) -> None:
        server.should_exit = True
        await task

    task = app.sync.run(start())
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.sync.run(stop(task))
        sock.close()


class Board:
    """A real `durably dashboard` process on a free port (`--app APP`, the token TOKEN)."""

    TOKEN = "t0ken-of-the-board"

    def __init__(self, url: str, app: str, tmp: Path, processes: Processes) -> None:
        self.url = url
        self.app = app
        self.log = tmp / "dashboard.log"
        self.proc = processes.start(
            [sys.executable, "-m", "durably.cli", "dashboard", "--port", "0"], self.log,
            env=self.env(), cwd=ROOT,
        )  # fmt: skip
        line = eventually_sync(self._started, 30, "durably dashboard to listen")
        self.base = re.search(r" on (http://\S+?)/ ", line).group(1)  # type: ignore[union-attr]
        self.host = self.base.removeprefix("http://")
        self.http = httpx.Client(base_url=self.base, timeout=scaled(30))

    def env(self) -> dict[str, str]:
        return dict(os.environ, DURABLY_DATABASE_URL=self.url, DURABLY_APP=self.app,
                    DURABLY_DASHBOARD_TOKEN=self.TOKEN, PYTHONPATH=str(ROOT))  # fmt: skip

    def _started(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"durably dashboard exited {self.proc.returncode}\n"
                                 f"{tail(self.log)}")  # fmt: skip
        found = re.search(r"^durably dashboard on .*$", self.log.read_text(), re.MULTILINE)
        return found.group(0) if found else None


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, timeout=scaled(30) * 1000, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])  # fmt: skip
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; Playwright's waits (30 s each by default) stretched like any deadline."""
    p = browser.new_page()
    p.set_default_timeout(scaled(30) * 1000)
    try:
        yield p
    finally:
        p.close()
