"""Live pages in a real browser (Debian's Chromium, Playwright) against a real `durably
dashboard` process and a real worker process, on both backends: the runs list follows a
run as it goes on, without a reload, and a signal sent from the page ends its wait."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.conftest import NO_CHROMIUM, ROOT, Board
from tests.helpers import eventually_sync, run_command, scaled
from tests.processes import Processes

pytestmark = NO_CHROMIUM
APP = "tests.apps.served:app"


@pytest.fixture
def board(db_url: str, tmp_path: Path, processes: Processes) -> Iterator[Board]:
    env = dict(os.environ, DURABLY_DATABASE_URL=db_url)
    run_command("durably.cli", ("migrate",), env, ROOT, check=True)
    b = Board(db_url, APP, tmp_path, processes)
    processes.start([sys.executable, "-m", "durably.cli", "worker", "--poll", "200ms"],
                    tmp_path / "worker.log", env=b.env(), cwd=ROOT)  # fmt: skip
    try:
        yield b
    finally:
        b.http.close()


def _start(board: Board, order: str) -> str:
    answer = board.http.post("/api/v1/runs", json={"workflow": "approval", "input": {"id": order}},
                             headers={"Authorization": f"Bearer {board.TOKEN}"})  # fmt: skip
    assert answer.status_code == 201, answer.text
    return str(answer.json()["run_id"])


def test_the_runs_list_follows_a_run_and_a_signal_sent_from_it(board: Board, page: Any) -> None:
    from playwright.sync_api import expect

    wait_ms = scaled(30) * 1000
    page.goto(f"{board.base}/login")
    page.fill("input[name=token]", board.TOKEN)
    page.click("#login button")
    expect(page.locator("[role=status]")).to_contain_text("logged in")

    page.evaluate("window.loaded = 'once'")  # gone if the page reloads
    run_id = _start(board, "o1")
    row = page.locator("#runs tr", has_text=run_id)
    expect(row).to_be_visible(timeout=wait_ms)  # the new run, as it was started
    expect(row).to_contain_text("waiting", timeout=wait_ms)  # claimed, ran, waits
    expect(row).to_contain_text("signal:approve:o1")
    assert page.evaluate("window.loaded") == "once"

    page.fill("#signal input[name=name]", "approve:o1")
    page.fill("#signal input[name=data]", '{"by": "ann"}')
    page.click("#signal button")
    expect(page.locator("[role=status]")).to_contain_text("signal delivered")
    page.evaluate("window.loaded = 'after the signal'")
    row = page.locator("#runs tr", has_text=run_id)
    expect(row).to_contain_text("completed", timeout=wait_ms)
    assert page.evaluate("window.loaded") == "after the signal"

    # The run's page, live too: its events as the run set them, its output.
    page.click(f"#runs a[href='/runs/{run_id}']")
    expect(page.locator("#run")).to_contain_text('"by": "ann"')
    expect(page.locator("#events")).to_contain_text('{"approved": {"by": "ann"}}')
    run = board.http.get(f"/api/v1/runs/{run_id}",
                         headers={"Authorization": f"Bearer {board.TOKEN}"}).json()  # fmt: skip
    assert run["status"] == "completed" and run["output"] == {"by": "ann"}


def test_a_run_s_page_follows_it_and_keeps_a_form_being_filled(board: Board, page: Any) -> None:
    from playwright.sync_api import expect

    wait_ms = scaled(30) * 1000
    run_id = _start(board, "o2")
    page.goto(f"{board.base}/runs/{run_id}")
    page.evaluate("window.loaded = 'once'")
    expect(page.locator("form.send-signal")).to_contain_text("approve:o2", timeout=wait_ms)
    expect(page.locator("#events")).to_contain_text('{"waiting": "approve:o2"}')
    # Someone types into the part's form: what they type is not replaced by updates.
    page.fill("form.send-signal input[name=data]", '"typed"')
    board.http.post("/api/v1/signals", json={"name": "approve:o2", "data": "from elsewhere"},
                    headers={"Authorization": f"Bearer {board.TOKEN}"})  # fmt: skip

    def ended() -> bool:
        answer = board.http.get(f"/api/v1/runs/{run_id}",
                                headers={"Authorization": f"Bearer {board.TOKEN}"})  # fmt: skip
        return bool(answer.json()["status"] == "completed")

    eventually_sync(ended, 30, "the run completing")
    # Held back while the form is the user's (a reload, or a swap, would lose it).
    assert page.input_value("form.send-signal input[name=data]") == '"typed"'
    assert "waiting" in page.inner_text("#run")
    assert page.evaluate("window.loaded") == "once"
