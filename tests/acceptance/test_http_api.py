"""The HTTP API (SPEC §4.25) from outside: a real `durably serve` process, a real worker
process, and raw HTTP requests (httpx, not the Python client), on both backends."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.conftest import ROOT
from tests.helpers import eventually_sync, run_command, scaled, tail
from tests.processes import Processes

APP = "tests.apps.served:app"
TOKEN = "t0ken-for-the-api"
API = "/api/v1"


class Served:
    """A `durably serve` process on a free port, and what the test needs to call it."""

    def __init__(self, url: str, tmp: Path, processes: Processes) -> None:
        self.url = url
        self.tmp = tmp
        self.processes = processes
        self.log = tmp / "serve.log"
        self.proc = processes.start(
            [sys.executable, "-m", "durably.cli", "serve", "--port", "0",
             "--allow-host", "api.example"], self.log, env=self.env(), cwd=ROOT,
        )  # fmt: skip
        line = eventually_sync(self._started, 30, "durably serve to listen")
        self.base = re.search(r"on (http://\S+?)/api/v1/", line).group(1)  # type: ignore[union-attr]
        self.host = self.base.removeprefix("http://")
        self.http = httpx.Client(base_url=self.base, timeout=scaled(30))

    def _started(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"durably serve exited {self.proc.returncode}\n{tail(self.log)}")
        found = re.search(r"^durably API on .*$", self.log.read_text(), re.MULTILINE)
        return found.group(0) if found else None

    def env(self) -> dict[str, str]:
        return dict(os.environ, DURABLY_DATABASE_URL=self.url, DURABLY_APP=APP,
                    DURABLY_DASHBOARD_TOKEN=TOKEN, PYTHONPATH=str(ROOT))  # fmt: skip

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             token: str | None = TOKEN, host: str | None = None,
             params: Mapping[str, str | list[str]] | None = None) -> httpx.Response:  # fmt: skip
        """`method` on `/api/v1{path}`, the body `body` as JSON (or the bytes `raw`)."""
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if host is not None:
            headers["Host"] = host
        content = raw if raw is not None else (None if body is None else json.dumps(body))
        return self.http.request(method, API + path, content=content, headers=headers,
                                 params=params)  # fmt: skip

    def ok(self, method: str, path: str, body: Any = None, expect: int = 200,
           **params: str) -> Any:  # fmt: skip
        """The JSON of a call that must answer `expect`; `params`: the query."""
        answer = self.call(method, path, body, params=params or None)
        assert answer.status_code == expect, answer.text
        assert answer.headers["content-type"] == "application/json"
        return answer.json()

    def worker(self) -> None:
        cmd = [sys.executable, "-m", "durably.cli", "worker", "--poll", "200ms"]
        self.processes.start(cmd, self.tmp / "worker.log", env=self.env(), cwd=ROOT)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_command("durably.cli", args, self.env(), ROOT, check)

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--json").stdout)

    def cli_error(self, *args: str) -> str:
        """The message the CLI prints for `args` (which must fail, exit 2)."""
        done = self.cli(*args, "--json", check=False)
        assert done.returncode == 2, done.stderr
        return str(json.loads(done.stderr)["error"])

    def until(self, run_id: str, status: str) -> dict[str, Any]:
        def reached() -> Any:
            run = self.ok("GET", f"/runs/{run_id}")
            return run if run["status"] == status else None

        found: dict[str, Any] = eventually_sync(reached, 30, f"run {run_id} {status}")
        return found


@pytest.fixture
def served(db_url: str, tmp_path: Path, processes: Processes) -> Iterator[Served]:
    done = run_command("durably.cli", ("migrate",), dict(os.environ, DURABLY_DATABASE_URL=db_url),
                       ROOT, check=True)  # fmt: skip
    assert done.returncode == 0
    s = Served(db_url, tmp_path, processes)
    try:
        yield s
    finally:
        s.http.close()


# Every route, with a body it would take: what the token and Host checks are tried on.
ROUTES = [
    ("GET", "/runs", None),
    ("POST", "/runs", {"workflow": "price", "input": {"id": "o1"}}),
    ("GET", "/runs/r-1", None),
    ("POST", "/runs/r-1/cancel", None),
    ("POST", "/runs/r-1/resume", None),
    ("GET", "/runs/r-1/events/stage", None),
    ("GET", "/runs/r-1/streams/tokens", None),
    ("POST", "/signals", {"name": "approve:o1", "data": True}),
    ("POST", "/runs/r-1/requests", {"name": "ask", "data": 1}),
    ("GET", "/openapi.json", None),
]


def _nothing_written(served: Served) -> None:
    assert served.ok("GET", "/runs") == []
    assert served.cli_json("signals", "--all") == []


def test_every_route_needs_the_token(served: Served) -> None:
    for method, path, body in ROUTES:
        for token in (None, "wrong", TOKEN + "x", TOKEN[:-1]):
            answer = served.call(method, path, body, token=token)
            assert answer.status_code == 401, (method, path, token, answer.text)
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert "token" in answer.json()["error"]
        basic = served.http.request(method, API + path, headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status_code == 401
    _nothing_written(served)
    for method, path, body in ROUTES:  # with it, each is served (r-1 does not exist: 404)
        assert served.call(method, path, body).status_code in (200, 201, 404), (method, path)


def test_a_foreign_host_is_refused_421_reads_included(served: Served) -> None:
    port = served.host.rsplit(":", 1)[1]
    for method, path, body in ROUTES:
        for host in (f"evil.example:{port}", f"localhost:{port}", "127.0.0.1:1", "127.0.0.1"):
            answer = served.call(method, path, body, host=host)
            assert answer.status_code == 421, (method, path, host, answer.text)
            assert "--allow-host" in answer.json()["error"]
        evil = served.call(method, path, body, host=f"evil.example:{port}", token=None)
        assert evil.status_code == 421  # before the token is looked at
    _nothing_written(served)
    for host in (served.host, f"api.example:{port}", "API.EXAMPLE"):  # the bound and --allow-host
        assert served.call("GET", "/runs", host=host).status_code == 200, host


BAD_STARTS: list[tuple[bytes | dict[str, Any], str]] = [
    (b"{bad", "the request body is not valid JSON"),
    (b"", "needs a JSON object as its body"),
    (b"[1, 2]", "the request body must be a JSON object, not an array"),
    (b'{"workflow": "price", "input": {"id": NaN}}', "NaN has no JSON form"),
    (b'{"workflow": "price", "input": {"id": "a\\u0000b"}}', "holds a NUL character"),
    (b"\xff\xfe", "not UTF-8"),
    ({"input": {"id": "o1"}}, "workflow must be a non-empty string"),
    ({"workflow": 3}, "workflow must be a non-empty string, not a number"),
    ({"workflow": "price", "input": {"id": "o1"}, "idempotency": "k"}, "no field 'idempotency'"),
    ({"workflow": "price", "input": {"id": "o1"}, "available_at": "soon"}, "not a time"),
    ({"workflow": "price", "input": {"id": "o1"}, "available_at": "+99999999999d"},
     "longer than 1000 years"),
    ({"workflow": "price", "input": {"id": "o1"}, "priority": "high"}, "priority must be"),
    ({"workflow": "price", "input": {"id": "o1"}, "attributes": {"customer": [1]}},
     "an attribute is a str, int, float or bool"),
    ({"workflow": "price", "input": {"id": "o1"}, "attributes": ["customer"]},
     "must be a mapping"),
    ({"workflow": "price", "input": {"id": "x" * (1024 * 1024)}}, "over the limit of 1048576"),
]  # fmt: skip


BAD_SIGNALS: list[tuple[dict[str, Any], str]] = [
    ({"data": 1}, "name must be a non-empty string"),
    ({"name": "  "}, "a signal needs a name"),
    ({"name": "x", "data": [float("inf")]}, "Infinity has no JSON form"),
    ({"name": "x", "expires": "forever"}, "not a duration"),
    ({"name": "x", "to": "r"}, "no field 'to'"),
]


def test_bad_input_is_400_with_the_cli_s_message_and_writes_nothing(served: Served) -> None:
    for body, message in BAD_STARTS:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        answer = served.call("POST", "/runs", raw=raw)
        assert answer.status_code == 400, (body, answer.text)
        assert message in answer.json()["error"], (body, answer.text)
    huge = served.call("POST", "/runs", raw=b'{"input": "' + b"x" * (4 * 1024 * 1024) + b'"}')
    assert huge.status_code == 400 and "the request body is over" in huge.json()["error"]
    for signal_body, message in BAD_SIGNALS:
        answer = served.call("POST", "/signals", raw=json.dumps(signal_body).encode())
        assert answer.status_code == 400 and message in answer.json()["error"], answer.text
    for params, message in [({"status": "sleeping"}, "status must be one of"),
                            ({"limit": "0"}, "limit must be a whole number of at least 1"),
                            ({"state": "failed"}, "no query parameter 'state'"),
                            ({"stuck": "maybe"}, "stuck is true or false"),
                            ({"attr": "customer"}, "an attribute is KEY=VALUE")]:  # fmt: skip
        answer = served.call("GET", "/runs", params=params)
        assert answer.status_code == 400 and message in answer.json()["error"], answer.text
    assert served.call("POST", "/runs/r-1/cancel", raw=b"{bad").status_code == 400
    _nothing_written(served)
    # The messages are the CLI's own.
    invalid = served.call("POST", "/runs", {"workflow": "price", "input": {"idx": 1}}).json()
    assert invalid["error"] == served.cli_error("start", "price", "--input", '{"idx": 1}')
    _nothing_written(served)


def test_unknown_runs_and_workflows_are_404(served: Served) -> None:
    for method, path, body in ROUTES[2:6]:
        answer = served.call(method, path, body)
        assert answer.status_code == 404, (method, path)
        assert answer.json() == {"error": "no run with id 'r-1'"}
    assert served.cli_error("cancel", "r-1") == "no run with id 'r-1'"
    unknown = served.call("POST", "/runs", {"workflow": "nope", "input": {}})
    assert unknown.status_code == 404
    assert unknown.json()["error"] == served.cli_error("start", "nope", "--input", "{}")
    addressed = served.call("POST", "/signals", {"name": "x", "run": "r-1"})
    assert addressed.status_code == 404, addressed.text
    no_route = served.call("GET", "/workflows")
    assert no_route.status_code == 404 and "openapi.json" in no_route.json()["error"]
    assert served.call("DELETE", "/runs").status_code == 405
    _nothing_written(served)


def test_an_idempotent_start_and_a_conflict(served: Served) -> None:
    body = {"workflow": "price", "input": {"id": "o1"}, "idempotency_key": "order-1",
            "available_at": "+1h"}  # fmt: skip
    answer = served.call("POST", "/runs", body)
    assert answer.status_code == 201, answer.text
    started = answer.json()
    assert set(started) == {"run_id", "status", "version"}
    assert started["status"] == "pending" and started["version"] == "v1"
    assert answer.headers["location"] == f"{API}/runs/{started['run_id']}"
    again = served.call("POST", "/runs", {**body, "input": {"amount": 1, "id": "o1"}})
    assert again.status_code == 200 and again.json() == started  # an equal input
    conflict = served.call("POST", "/runs", {**body, "input": {"id": "o2"}})
    assert conflict.status_code == 409
    assert conflict.json()["error"] == served.cli_error(
        "start", "price", "--input", '{"id": "o2"}', "--idempotency-key", "order-1"
    )
    listed = served.ok("GET", "/runs", key="order-1")
    assert [r["run_id"] for r in listed] == [started["run_id"]]
    assert served.ok("GET", "/runs", key="order-2") == []


def test_a_debounced_start_over_http_and_the_cli_join_one_window(served: Served) -> None:
    body = {"workflow": "price", "input": {"id": "o1"}, "debounce": "1h",
            "debounce_key": "cart-1", "debounce_max": "2h"}  # fmt: skip
    opened = served.call("POST", "/runs", body)
    assert opened.status_code == 201, opened.text
    started = opened.json()
    joined = served.call("POST", "/runs", {**body, "input": {"id": "o2"}})
    assert joined.status_code == 200 and joined.json() == started  # the window's run
    assert served.cli_json(
        "start", "price", "--input", '{"id": "o3", "amount": 2}', "--debounce", "1h",
        "--debounce-key", "cart-1", "--debounce-max", "2h",
    ) == started  # fmt: skip
    run = served.ok("GET", f"/runs/{started['run_id']}")
    assert run["input"] == {"id": "o3", "amount": 2} and run["status"] == "pending"
    assert (
        run["debounce_key"] == "cart-1"
        and "debounce_key cart-1" in served.cli("show", started["run_id"]).stdout
    )
    refused = served.call("POST", "/runs", {**body, "debounce_max": "1m"})
    assert refused.status_code == 400
    assert refused.json()["error"] == served.cli_error(
        "start", "price", "--input", '{"id": "o1"}', "--debounce", "1h", "--debounce-key",
        "cart-1", "--debounce-max", "1m",
    )  # fmt: skip
    assert "at least debounce" in refused.json()["error"]
    assert "debounce_key" in served.cli_error("start", "price", "--debounce", "5s")
    assert [r["run_id"] for r in served.ok("GET", "/runs")] == [started["run_id"]]
    assert served.ok("GET", f"/runs/{started['run_id']}")["input"] == run["input"]


def test_a_run_started_over_http_completes_in_a_worker(served: Served) -> None:
    started = served.ok(
        "POST", "/runs", {"workflow": "price", "input": {"id": "o1", "amount": 3}}, 201
    )
    served.worker()
    run = served.until(started["run_id"], "completed")
    assert run["output"] == {"id": "o1", "total": 30} and run["attempts"] == 1
    # The documents are the CLI's --json ones, field for field.
    assert run == served.cli_json("show", started["run_id"])["run"]
    assert served.ok("GET", "/runs") == served.cli_json("runs")
    assert served.ok("GET", "/runs", status="completed", workflow="price", limit="1") == [run]
    assert served.ok("GET", "/runs", status="failed") == []
    assert served.ok("GET", "/runs", stuck="true") == []
    canceled = served.call("POST", f"/runs/{started['run_id']}/cancel")
    assert canceled.status_code == 409 and "already completed" in canceled.json()["error"]


def test_runs_are_started_and_listed_by_their_attributes(served: Served) -> None:
    body = {"workflow": "price", "input": {"id": "o1"}, "available_at": "+1h"}
    a = served.ok("POST", "/runs", {**body, "attributes": {"customer": "c-1", "n": 30}}, 201)
    b = served.ok("POST", "/runs", {**body, "attributes": {"customer": "c-1", "n": 2}}, 201)

    def listed(*attrs: str) -> list[str]:
        answer = served.call("GET", "/runs", params={"attr": list(attrs)})
        assert answer.status_code == 200, answer.text
        return [r["run_id"] for r in answer.json()]

    assert listed("customer=c-1") == [b["run_id"], a["run_id"]]
    assert listed("customer=c-1", "n=30") == [a["run_id"]]
    assert listed('n="30"') == []  # a string is not the number
    run = served.ok("GET", f"/runs/{a['run_id']}")
    assert run["attributes"] == {"customer": "c-1", "n": 30}
    assert run == served.cli_json("show", a["run_id"])["run"]


def test_a_signal_sent_over_http_reaches_the_waiting_run(served: Served) -> None:
    run_id = served.ok("POST", "/runs", {"workflow": "approval", "input": {"id": "o7"}},
                       201)["run_id"]  # fmt: skip
    served.worker()
    stage = served.ok("GET", f"/runs/{run_id}/events/stage", timeout="30s")
    assert stage == {"run_id": run_id, "key": "stage", "value": {"waiting": "approve:o7"}}
    served.until(run_id, "waiting")
    sent = served.ok("POST", "/signals", {"name": "approve:o7", "data": {"by": "ops"},
                                          "idempotency_key": "approve-o7"})  # fmt: skip
    assert sent == {"delivered_to": [run_id], "buffered": False, "duplicate": False}
    again = served.ok("POST", "/signals", {"name": "approve:o7", "data": {"by": "ops"},
                                           "idempotency_key": "approve-o7"})  # fmt: skip
    assert again["duplicate"] is True
    run = served.until(run_id, "completed")
    assert run["output"] == {"by": "ops"}
    assert served.ok("GET", f"/runs/{run_id}/events/stage")["value"] == {"approved": {"by": "ops"}}
    missing = served.call("GET", f"/runs/{run_id}/events/nothing", params={"timeout": "0s"})
    assert missing.status_code == 404 and "has set no event 'nothing'" in missing.json()["error"]
    late = served.call("POST", "/signals", {"name": "approve:o7", "run": run_id})
    assert late.status_code == 409 and "already completed" in late.json()["error"]
    buffered = served.ok("POST", "/signals", {"name": "nobody-waits", "data": [1]})
    assert buffered == {"delivered_to": [], "buffered": True, "duplicate": False}


def test_a_request_over_http_gets_the_workflow_s_answer(served: Served) -> None:
    run_id = served.ok("POST", "/runs", {"workflow": "answer", "input": 2}, 201)["run_id"]
    served.worker()
    ask = f"/runs/{run_id}/requests"
    answered = served.ok("POST", ask, {"name": "ask", "data": 21, "idempotency_key": "k"})
    assert answered["answer"] == 42 and answered["request_id"]
    assert served.ok("POST", ask, {"name": "ask", "data": 21, "idempotency_key": "k"}) == answered
    late = served.call("POST", ask, {"name": "other", "timeout": "100ms"})
    assert late.status_code == 504 and late.json()["request_id"], late.text
    rejected = served.call("POST", ask, {"name": "ask", "data": "x"})
    assert rejected.status_code == 422, rejected.text
    assert rejected.json()["reason"] == "'x' is not a number"
    served.until(run_id, "completed")
    assert served.call("POST", ask, {"name": "ask", "data": 1}).status_code == 409
    assert served.call("POST", "/runs/nope/requests", {"name": "ask"}).status_code == 404
    assert served.call("POST", ask, {"data": 1}).status_code == 400  # no name


def test_cancel_and_resume_answer_the_run(served: Served) -> None:
    later = served.ok("POST", "/runs", {"workflow": "price", "input": {"id": "o1"},
                                        "available_at": "+1h"}, 201)["run_id"]  # fmt: skip
    refused = served.call("POST", f"/runs/{later}/resume")
    assert refused.status_code == 400 and "pending" in refused.json()["error"]
    canceled = served.ok("POST", f"/runs/{later}/cancel")
    assert canceled["run_id"] == later and canceled["status"] == "canceled"
    assert canceled == served.cli_json("show", later)["run"]
    assert served.call("POST", f"/runs/{later}/cancel").status_code == 409
    failing = served.ok("POST", "/runs", {"workflow": "charge", "input": {"id": "o2"}}, 201)
    served.worker()
    failed = served.until(failing["run_id"], "failed")
    assert "card declined" in failed["error"]["message"]
    resumed = served.ok("POST", f"/runs/{failing['run_id']}/resume", {})
    assert resumed["status"] == "pending" and resumed["run_id"] == failing["run_id"]
    served.until(failing["run_id"], "failed")  # it fails again: the card is still declined


def test_the_openapi_document_lists_the_routes(served: Served) -> None:
    doc = served.ok("GET", "/openapi.json")
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {f"{API}{p}" for p in (
        "/runs", "/runs/{run_id}", "/runs/{run_id}/cancel", "/runs/{run_id}/resume",
        "/runs/{run_id}/events/{key}", "/runs/{run_id}/streams/{key}", "/signals",
        "/openapi.json", "/runs/{run_id}/requests")}  # fmt: skip
    assert doc["components"]["securitySchemes"]["token"]["scheme"] == "bearer"


def test_sigterm_finishes_the_server_and_it_exits_0(served: Served) -> None:
    assert served.call("GET", "/runs").status_code == 200
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(scaled(30)) == 0, tail(served.log)
    log = served.log.read_text()
    assert "Traceback" not in log and "Application shutdown complete" in log


def test_a_port_in_use_is_one_line_exit_1(served: Served) -> None:
    port = served.host.rsplit(":", 1)[1]
    done = served.cli("serve", "--port", port, check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: cannot serve on 127.0.0.1:{port}: Address already in use"


def test_without_the_web_extra_serve_exits_2_with_the_install_hint(tmp_path: Path) -> None:
    hide = ("import sys; sys.modules['starlette'] = None; sys.modules['uvicorn'] = None; "
            "sys.argv = ['durably', 'serve']; from durably.cli import main; main()")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), DURABLY_DATABASE_URL=f"sqlite:///{tmp_path}/x.db")
    done = subprocess.run([sys.executable, "-c", hide], env=env, cwd=tmp_path, text=True,
                          capture_output=True, timeout=scaled(60))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "pip install 'durably[web]'" in done.stderr and "starlette" in done.stderr
