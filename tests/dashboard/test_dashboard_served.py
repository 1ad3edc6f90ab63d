"""A real `durably dashboard` process, driven over raw HTTP (httpx, not the Python client),
on both backends: the pages and the API from one server with one token, the `Host`
allow-list in front of everything, a page's event stream, `/metrics` as Prometheus
parses it, a SIGTERM while streams are open."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from tests.dashboard.conftest import ROOT, Board
from tests.helpers import run_command, scaled, tail
from tests.processes import Processes

APP = "tests.apps.served:app"


@pytest.fixture
def board(db_url: str, tmp_path: Path, processes: Processes) -> Iterator[Board]:
    env = dict(os.environ, DURABLY_DATABASE_URL=db_url)
    run_command("durably.cli", ("migrate",), env, ROOT, check=True)
    b = Board(db_url, APP, tmp_path, processes)
    try:
        yield b
    finally:
        b.http.close()


def _api(board: Board, method: str, path: str, body: Any = None, **headers: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {board.TOKEN}", **headers}
    return board.http.request(method, f"/api/v1{path}", json=body, headers=headers)


def _start(board: Board, order: str) -> str:
    answer = _api(board, "POST", "/runs", {"workflow": "approval", "input": {"id": order}})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["run_id"])


def _events(stream: httpx.Response) -> Iterator[dict[str, str]]:
    """The server-sent events of `stream`, each as its fields (comments skipped)."""
    fields: dict[str, list[str]] = {}
    for line in stream.iter_lines():
        if not line:
            if fields:
                yield {name: "\n".join(values) for name, values in fields.items()}
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))


def test_the_pages_and_the_api_are_one_server_with_one_token(board: Board) -> None:
    assert _api(board, "GET", "/runs").json() == []
    refused = board.http.get("/api/v1/runs")  # the pages need no token; the API does
    assert refused.status_code == 401 and "Bearer" in refused.json()["error"]
    page = board.http.get("/")
    assert page.status_code == 200 and "<table id='runs'>" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["content-type"].startswith("text/html")
    gone = board.http.get("/no-such-page")
    assert gone.status_code == 404 and "no page /no-such-page" in gone.text
    port = board.host.rsplit(":", 1)[1]
    # Bound to 127.0.0.1, the server answers to the name browsers give loopback too.
    assert board.http.get("/", headers={"Host": f"localhost:{port}"}).status_code == 200


def test_a_foreign_host_is_421_on_pages_reads_and_metrics(board: Board) -> None:
    run_id = _start(board, "o1")
    port = board.host.rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", f"127.0.0.1:{int(port) + 1}", f"localhost.evil:{port}"):
        for path in ("/", f"/runs/{run_id}", "/metrics", "/login", "/live/", "/live.js",
                     f"/live/runs/{run_id}", "/api/v1/runs", "/nothing-here"):  # fmt: skip
            answer = board.http.get(path, headers={"Host": host})
            assert answer.status_code == 421, (host, path, answer.text)
            assert run_id not in answer.text and "--allow-host" in answer.json()["error"]
        forged = board.http.post("/signal", headers={"Host": host},
                                 data={"name": "approve:o1", "run_id": run_id})  # fmt: skip
        assert forged.status_code == 421
    assert _api(board, "GET", f"/runs/{run_id}").json()["status"] != "completed"


def test_a_page_s_stream_sends_its_part_when_runs_change(board: Board) -> None:
    page = board.http.get("/")
    live = re.search(r"data-live='([^']+)'", page.text).group(1)  # type: ignore[union-attr]
    assert live.startswith("/live/?seen=")
    with board.http.stream("GET", live) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = _events(stream)
        # The page holds the part as it was: the stream's first event is the first change.
        run_id = _start(board, "o2")
        update = next(events)
        assert update["event"] == "update" and run_id in update["data"]
        assert update["data"].startswith("<table id='runs'>") and "<html" not in update["data"]
        assert update["id"] not in live
    # A run's page has a stream of its own, and an unknown run none.
    with board.http.stream("GET", f"/live/runs/{run_id}") as stream:
        first = next(_events(stream))  # no `seen`: the part as it is, at once
        assert "<table id='run'>" in first["data"] and "approval@v1" in first["data"]
    assert board.http.get("/live/runs/no-such-run").status_code == 404
    assert "EventSource" in board.http.get("/live.js").text


def test_metrics_parse_as_prometheus_text_and_openmetrics(board: Board) -> None:
    _start(board, "o3")
    answer = board.http.get("/metrics")
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    assert {"durably_runs", "durably_step_attempts", "durably_queue_depth",
            "durably_claim_latency_seconds", "durably_worker_last_heartbeat_age_seconds",
            "durably_queue_running", "durably_queue_waiting"} <= set(families)  # fmt: skip
    assert all(f.type == "gauge" for f in families.values())
    pending = [s for s in families["durably_runs"].samples if s.labels == {"status": "pending"}]
    assert [s.value for s in pending] == [1.0]
    assert [s.value for s in families["durably_queue_depth"].samples] == [1.0]

    accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
    open_answer = board.http.get("/metrics", headers=accept)
    assert open_answer.headers["content-type"].startswith("application/openmetrics-text")
    names = {f.name for f in openmetrics_families(open_answer.text)}  # type: ignore[no-untyped-call]
    assert "durably_runs" in names


def test_sigterm_ends_the_open_streams_and_the_server_exits_0(board: Board) -> None:
    with board.http.stream("GET", "/live/") as stream, \
         board.http.stream("GET", "/live/?status=failed") as other:  # fmt: skip
        events = _events(stream)
        assert "<table id='runs'>" in next(events)["data"]  # open, and seen by the server
        next(_events(other))
        board.proc.send_signal(signal.SIGTERM)
        assert list(events) == []  # the stream ends: the server closed it
    assert board.proc.wait(scaled(30)) == 0, tail(board.log)
    log = board.log.read_text()
    assert "Traceback" not in log and "Application shutdown complete" in log
    # Ended at once, not after uvicorn's grace (it would cancel them, and say so).
    assert "timeout graceful shutdown exceeded" not in log, tail(board.log)


def test_without_the_web_extra_dashboard_exits_2_with_the_install_hint(tmp_path: Path) -> None:
    hide = ("import sys; sys.modules['jinja2'] = None; sys.argv = ['durably', 'dashboard']; "
            "from durably.cli import main; main()")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), DURABLY_DATABASE_URL=f"sqlite:///{tmp_path}/x.db")
    done = subprocess.run([sys.executable, "-c", hide], env=env, cwd=tmp_path, text=True,
                          capture_output=True, timeout=scaled(60))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "durably dashboard needs the web extra (jinja2 is not installed)" in done.stderr
    assert "pip install 'durably[web]'" in done.stderr
    assert not (tmp_path / "x.db").exists()
