"""The HTTP API's guard (durably.web.guard) in process, before any database is reached:
the `Host` allow-list, the bearer token, and the OpenAPI document listing every route."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from durably import Durably
from durably.web.api import Api
from durably.web.app import PREFIX, create_app
from durably.web.credential import same_token
from durably.web.guard import HostAllowList, loopback_aliases
from durably.web.openapi import DOCUMENT

TOKEN = "s3cret-token"
BOUND = "127.0.0.1:8080"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    # No call below reaches the database: the file is never created.
    app = Durably(f"sqlite:///{tmp_path / 'never.db'}")
    allowed = HostAllowList.of("127.0.0.1", 8080, ["api.example", "proxy.example:8443"])
    with TestClient(create_app(app, TOKEN, allowed), base_url=f"http://{BOUND}") as c:
        yield c
    assert not (tmp_path / "never.db").exists()


def _get(client: TestClient, host: str, token: str | None = TOKEN) -> int:
    headers = {"Host": host}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.get(f"{PREFIX}/openapi.json", headers=headers).status_code


@pytest.mark.parametrize(
    ("host", "status"),
    [
        (BOUND, 200),
        ("127.0.0.1:8081", 421),  # the bound host, another port
        ("localhost:8080", 421),  # a name that is not the bound address
        ("evil.example:8080", 421),  # DNS rebinding
        ("127.0.0.1", 421),  # no port: 80
        ("API.example.", 200),  # --allow-host NAME: any case, any port, a trailing dot
        ("api.example:9999", 200),
        ("proxy.example:8443", 200),  # --allow-host NAME:PORT: that port only
        ("proxy.example:443", 421),
        ("proxy.example", 421),
        ("api.example.evil:8080", 421),
        ("", 421),
    ],
)
def test_only_the_allowed_hosts_are_served(client: TestClient, host: str, status: int) -> None:
    assert _get(client, host) == status


def test_a_foreign_host_is_refused_before_the_token_is_looked_at(client: TestClient) -> None:
    answer = client.get(f"{PREFIX}/runs", headers={"Host": "evil.example:8080"})
    assert answer.status_code == 421
    assert "--allow-host" in answer.json()["error"]
    assert client.get("/", headers={"Host": "evil.example:8080"}).status_code == 421


@pytest.mark.parametrize(
    ("host", "aliases"),
    [("127.0.0.1", ["localhost:8080"]), ("127.0.0.2", ["localhost:8080"]),
     ("::1", ["localhost:8080"]), ("[::1]", ["localhost:8080"]),
     ("0.0.0.0", ["localhost:8080"]), ("::", ["localhost:8080"]),
     ("192.168.1.20", []), ("10.0.0.1", []), ("box.lan", [])],
)  # fmt: skip
def test_a_loopback_bind_is_also_localhost_on_its_port(host: str, aliases: list[str]) -> None:
    assert loopback_aliases(host, 8080) == aliases
    allowed = HostAllowList.of(host, 8080, loopback_aliases(host, 8080))
    assert allowed.allows("localhost:8080") == bool(aliases)
    assert not allowed.allows("localhost:8081") and not allowed.allows("localhost")


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer s3cret",
     f"Bearer {TOKEN[:-1]}é".encode()],  # a byte no token of ours has
)  # fmt: skip
def test_every_call_needs_the_token(client: TestClient, authorization: str | bytes | None) -> None:
    value = authorization.encode() if isinstance(authorization, str) else authorization
    headers = {} if value is None else {b"Authorization": value}
    for method, path in [("GET", "/runs"), ("POST", "/runs"), ("GET", "/runs/r1"),
                         ("POST", "/runs/r1/cancel"), ("POST", "/signals"),
                         ("GET", "/openapi.json"), ("GET", "/no-such-route")]:  # fmt: skip
        answer = client.request(method, PREFIX + path, headers=headers, content=b"{bad")
        assert answer.status_code == 401, (method, path)
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert "token" in answer.json()["error"]


def test_the_token_passes_whatever_the_scheme_s_case(client: TestClient) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        headers = {"Authorization": f"{scheme} {TOKEN}"}
        assert client.get(f"{PREFIX}/openapi.json", headers=headers).status_code == 200


def test_tokens_are_compared_as_bytes() -> None:
    assert same_token("é", "é") and same_token("é".encode(), "é")
    assert not same_token("e", "é") and not same_token(None, "x") and not same_token("", "x")


def test_the_openapi_document_lists_every_route() -> None:
    served = {(PREFIX + r.path.replace(":path", ""), method.lower())
              for r in Api(Durably("sqlite:///unused.db")).routes() if isinstance(r, Route)
              for method in r.methods or () if method != "HEAD"}  # fmt: skip
    served.add((f"{PREFIX}/openapi.json", "get"))
    listed = {(path, method) for path, item in DOCUMENT["paths"].items() for method in item}
    assert listed == served
    assert DOCUMENT["openapi"].startswith("3.1")
