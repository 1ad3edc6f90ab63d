"""The dashboard in a real headless Chromium (Debian's), and /metrics; on both backends."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from durably import Durably
from tests.dashboard.conftest import NO_CHROMIUM, serving
from tests.helpers import scaled

pytestmark = NO_CHROMIUM


def make_app(url: str) -> Durably:
    app = Durably(url)

    @app.workflow(name="greet", version="v1")
    async def greet(ctx: Any, name: str) -> str:
        await ctx.step.wait_for_signal(f"go:{name}")
        return f"hello {name}"

    return app


@pytest.fixture
def board(db_url: str) -> Iterator[tuple[str, Durably, str]]:
    app = make_app(db_url)
    try:
        with serving(app, "t0ken") as base:
            yield base, app, "t0ken"
    finally:
        app.sync.close()


def test_list_filter_open_cancel_start_and_refuse(board: Any, page: Any) -> None:
    base, app, token = board
    runs = [app.sync.start("greet", n).run_id for n in ("ann", "bob")]
    app.sync.cancel(runs[1])

    page.goto(base + "/")
    assert page.locator("#runs tr").count() == 3  # header + two runs
    page.select_option("select[name=status]", "canceled")
    page.click("#filters button")
    assert page.locator("#runs tr").count() == 2 and runs[1] in page.inner_text("#runs")

    # Without the token, an action is refused and nothing changes.
    page.goto(f"{base}/runs/{runs[0]}")
    page.click("#cancel button")
    assert "needs the dashboard token" in page.inner_text("[role=alert]")
    assert app.sync.get_run(runs[0]).status == "pending"

    page.goto(base + "/login")
    page.fill("input[name=token]", token)
    page.click("#login button")
    assert "logged in" in page.inner_text("[role=status]")

    page.goto(f"{base}/runs/{runs[0]}")
    assert "ann" in page.inner_text("#run")
    page.click("#cancel button")
    assert "canceled" in page.inner_text("#run")
    assert app.sync.get_run(runs[0]).status == "canceled"

    page.goto(base + "/")
    page.fill("#start input[name=input]", '"cyd"')
    page.click("#start button")
    assert "started" in page.inner_text("[role=status]")
    started = page.url.rsplit("/", 1)[-1].split("?")[0]
    assert app.sync.get_run(started).input == "cyd"

    page.goto(base + "/")
    page.fill("#start input[name=input]", "{not json")
    page.click("#start button")
    assert "not valid JSON" in page.inner_text("[role=alert]")

    page.goto(base + "/")
    page.fill("#signal input[name=name]", "go:cyd")
    page.click("#signal button")
    assert "signal buffered" in page.inner_text("[role=status]")


def test_forged_form_is_refused(board: Any) -> None:
    base, app, _ = board
    run_id = app.sync.start("greet", "dan").run_id
    request = urllib.request.Request(f"{base}/runs/{run_id}/cancel", data=b"csrf=guess",
                                     method="POST")  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=scaled(10))
    assert err.value.code == 403
    err.value.close()
    assert app.sync.get_run(run_id).status == "pending"


def test_metrics(board: Any) -> None:
    base, app, _ = board
    app.sync.start("greet", "eve")
    with urllib.request.urlopen(base + "/metrics", timeout=scaled(10)) as resp:
        text = resp.read().decode()
    assert 'durably_runs{status="pending"} 1.0' in text
    assert "durably_queue_depth 1.0" in text
    assert "# TYPE durably_step_attempts gauge" in text
