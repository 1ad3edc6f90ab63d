"""The dashboard people keep open (§4.18): it refreshes itself, links parents and
children, shows when a pending run is due, what a waiting run waits for (with a button to
send it), events, tracebacks, and resumes, forks and purges behind the token. A real
worker process runs the workflows; screenshots are attached to the test's properties."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durably import Durably, Run, RunNotFound
from tests.dashboard.conftest import NO_CHROMIUM, serving
from tests.helpers import eventually_sync, scaled
from tests.processes import Processes

ROOT = Path(__file__).resolve().parents[2]
pytestmark = NO_CHROMIUM


def _client_app(url: str) -> Durably:
    """The dashboard's app: it knows the workflows' names (to start them), not their code."""
    app = Durably(url)

    @app.workflow(name="parent", version="v1")
    async def parent(ctx: Any, name: str) -> int:
        raise NotImplementedError

    return app


@pytest.fixture
def live_board(db_url: str, processes: Processes, tmp_path: Path) -> Iterator[tuple[str, Durably]]:
    app = _client_app(db_url)
    app.sync.migrate()
    env = {"DURABLY_DATABASE_URL": db_url, "DURABLY_APP": "tests.apps.operating:app",
           "RAN_LOG": str(tmp_path / "ran.log"), "PYTHONPATH": str(ROOT)}  # fmt: skip
    processes.start([sys.executable, "-m", "durably.cli", "worker", "--id", "board-worker"],
                    tmp_path / "worker.log", env={**os.environ, **env}, cwd=ROOT)  # fmt: skip
    try:
        with serving(app, "t0ken") as base:
            yield base, app
    finally:
        app.sync.close()


def _shot(page: Any, tmp_path: Path, name: str, record: Callable[[str, object], None]) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    record(f"screenshot-{name}", str(path))
    print(f"screenshot of the {name}: {path}")


def test_operating_from_the_dashboard(
    live_board: Any, page: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    from playwright.sync_api import expect

    base, app = live_board
    wait_ms = scaled(30) * 1000
    run_id = app.sync.start("parent", "ann").run_id
    later = app.sync.start("parent", "bob", available_at="+1h").run_id

    page.goto(f"{base}/login")
    page.fill("input[name=token]", "t0ken")
    page.click("#login button")

    # The page refreshes itself until the run waits for its signal.
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("form.send-signal")).to_contain_text("approve:ann", timeout=wait_ms)
    expect(page.locator("#events")).to_contain_text('{"child": 42}')
    child_id = app.sync.list_steps(run_id)[0].child_run_id
    assert child_id is not None
    page.click(f"#run a[href='/runs/{child_id}']")
    expect(page.locator("#run")).to_contain_text("parent")
    page.click(f"#run a[href='/runs/{run_id}']")
    _shot(page, tmp_path, "waiting-run", record_property)

    page.click("form.send-signal button")
    expect(page.locator("[role=status]")).to_contain_text("signal delivered")
    expect(page.locator("#run")).to_contain_text("failed", timeout=wait_ms)
    expect(page.locator("#steps")).to_contain_text("could not be made, boom")  # all of it
    page.click("#steps summary")
    expect(page.locator("#steps details pre")).to_contain_text("Traceback")
    _shot(page, tmp_path, "failed-run", record_property)

    page.click("#resume button")
    expect(page.locator("[role=status]")).to_contain_text("resumed")

    def failed_again() -> bool:
        run: Run = app.sync.get_run(run_id)
        return run.attempts == 2 and run.status == "failed"

    eventually_sync(failed_again, what="the resumed run failing again")
    page.goto(f"{base}/runs/{run_id}")
    page.fill("#fork input[name=from]", "3")
    page.click("#fork button")
    expect(page.locator("[role=status]")).to_contain_text(f"forked from {run_id}")
    forked = page.url.rsplit("/", 1)[-1].split("?")[0]
    assert forked != run_id
    copied = [s.kind for s in app.sync.list_steps(forked)][:3]
    assert copied == ["child", "event", "signal-wait"]

    page.goto(f"{base}/runs/{later}")
    expect(page.locator("#run")).to_contain_text("due at")

    page.goto(f"{base}/")
    _shot(page, tmp_path, "run-list", record_property)
    page.fill("#purge input[name=older_than]", "0s")
    page.select_option("#purge select[name=status]", "failed")
    page.click("#purge button")
    expect(page.locator("[role=status]")).to_contain_text("purged")
    with pytest.raises(RunNotFound):  # it had failed, and was purged
        app.sync.get_run(run_id)
    assert app.sync.get_run(later).status == "pending"
