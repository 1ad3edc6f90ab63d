"""The dashboard over plain HTTP (no browser): finding runs, the header, /metrics."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from durably import Durably
from durably.dashboard.auth import Auth
from durably.store.queues import QueueClaims
from tests.dashboard.conftest import serving
from tests.helpers import scaled


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=scaled(10)) as resp:
        return str(resp.read().decode())


@pytest.fixture
def served(db_url: str) -> Iterator[tuple[str, Durably]]:
    app = Durably(db_url)

    @app.workflow(name="order")
    async def order(ctx: Any, n: int) -> int:
        return n

    try:
        with serving(app, "t0ken") as base:
            yield base, app
    finally:
        app.sync.close()


def test_the_run_list_finds_a_run_by_its_idempotency_key(served: tuple[str, Durably]) -> None:
    base, app = served
    wanted = app.sync.start("order", 1, idempotency_key="order-42", available_at="+1h")
    other = app.sync.start("order", 2, idempotency_key="order-43", available_at="+1h")
    page = _get(base + "/?key=order-42")
    assert wanted.run_id in page and other.run_id not in page
    assert "name='key' value='order-42'" in page  # the search stays in its field
    assert wanted.run_id in _get(base + "/?key=order-42&workflow=order")
    assert wanted.run_id not in _get(base + "/?key=order-42&status=failed")


def test_the_run_list_filters_by_search_attributes(served: tuple[str, Durably]) -> None:
    base, app = served
    wanted = app.sync.start("order", 1, attributes={"customer": "c-1", "n": 30}, available_at="+1h")
    other = app.sync.start("order", 2, attributes={"customer": "c-2", "n": 30}, available_at="+1h")
    query = urllib.parse.quote("customer=c-1; n=30")
    page = _get(f"{base}/?attr={query}")
    assert wanted.run_id in page and other.run_id not in page
    assert "value='customer=c-1; n=30'" in page  # the search stays in its field
    both = _get(f"{base}/?attr=n%3D30")
    assert wanted.run_id in both and other.run_id in both
    assert wanted.run_id not in _get(f"{base}/?attr=n%3D30&status=failed")
    shown = _get(f"{base}/runs/{wanted.run_id}")
    assert '<code>customer="c-1"</code> <code>n=30</code>' in shown
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(f"{base}/?attr=customer")
    assert refused.value.code == 400
    assert "an attribute is KEY=VALUE" in refused.value.read().decode()


def _get_as(url: str, token: str) -> str:
    """The page, as a browser logged in with `token` asks for it (its session cookie)."""
    cookie = f"durably_token={Auth(token).session()}"
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=scaled(10)) as resp:
        return str(resp.read().decode())


def test_the_header_says_who_is_logged_in(served: tuple[str, Durably]) -> None:
    base, _ = served
    anonymous = _get(base + "/")
    assert "<a href='/login'>log in</a>" in anonymous and "logged in" not in anonymous
    header = _get_as(base + "/", "t0ken").split("<h1>")[0]
    assert "<span id='user'>logged in: token</span>" in header, header
    assert "logged in" not in _get_as(base + "/", "wrong").split("<h1>")[0]
    # The token itself is no session: the cookie a browser sends to every port of the
    # host must not be the API's bearer token.
    raw = urllib.request.Request(base + "/", headers={"Cookie": "durably_token=t0ken"})
    with urllib.request.urlopen(raw, timeout=scaled(10)) as resp:
        assert "logged in" not in resp.read().decode().split("<h1>")[0]


def test_a_child_link_is_an_element_of_its_own(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="child")
    async def child(ctx: Any) -> None:
        raise RuntimeError("out of stock")

    @app.workflow(name="parent")
    async def parent(ctx: Any) -> None:
        await ctx.step.run_workflow(child, None)

    async def family() -> tuple[str, str]:
        async with app.worker(poll_interval="50ms"):
            handle = await parent.start()
            await handle.wait(timeout=scaled(10))
        [step] = [s for s in await app.list_steps(handle.run_id) if s.child_run_id]
        assert step.child_run_id is not None and step.error is not None
        return handle.run_id, step.child_run_id

    parent_id, child_id = app.sync.run(family())
    try:
        with serving(app, "t0ken") as base:
            page = _get(f"{base}/runs/{parent_id}")
    finally:
        app.sync.close()
    link = f"<a href='/runs/{child_id}'>{child_id}</a>"
    assert f"<div class='child'>child {link}</div>" in page
    assert f"{link}ChildWorkflowError" not in page and "out of stock" in page


def test_metrics_have_samples_for_every_declared_queue(db_url: str) -> None:
    app = Durably(db_url)
    app.queue("idle", concurrency=2)  # declared by the app alone: no run, no worker
    busy = app.queue("busy", concurrency=1)

    @app.workflow(name="fetch", queue=busy)
    async def fetch(ctx: Any) -> None:
        return None

    elsewhere = Durably(db_url)  # a worker of another app declared its queue
    remote = elsewhere.queue("remote", concurrency=1)

    async def declare() -> None:
        async with elsewhere:
            await QueueClaims(elsewhere.store).declare([remote])

    app.sync.run(declare())
    app.sync.start("fetch", None)
    try:
        with serving(app, "t0ken") as base:
            metrics = _get(f"{base}/metrics")
    finally:
        app.sync.close()
    assert 'durably_queue_waiting{queue="busy"} 1.0' in metrics
    assert 'durably_queue_running{queue="busy"} 0.0' in metrics
    for queue in ("idle", "remote"):
        for gauge in ("running", "waiting"):
            assert f'durably_queue_{gauge}{{queue="{queue}"}} 0.0' in metrics, metrics


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def test_logging_in_takes_the_token_only(served: tuple[str, Durably]) -> None:
    base, _ = served
    opener = urllib.request.build_opener(_NoRedirect)
    for token, code in [("wrong", 403), ("t0ke", 403), ("t0kén", 403), ("t0ken", 303)]:
        form = urllib.parse.urlencode({"token": token}).encode()
        try:
            answer = opener.open(f"{base}/login", data=form, timeout=scaled(10))
        except urllib.error.HTTPError as exc:
            answer = exc
        with answer:
            assert answer.status == code, token
            cookie = answer.headers.get("Set-Cookie") or ""
            assert (f"durably_token={Auth('t0ken').session()};" in cookie) == (code == 303)
            assert "t0ken" not in cookie
