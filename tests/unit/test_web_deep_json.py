"""A deeply nested JSON body is bad input (400), not an internal error (500)."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from durably import Durably
from durably.web.app import PREFIX, create_app
from durably.web.guard import HostAllowList


def test_a_deeply_nested_body_is_a_400(tmp_path: Path) -> None:
    app = Durably(f"sqlite:///{tmp_path}/d.db")
    web = create_app(app, "t0ken", HostAllowList.of("127.0.0.1", 8080))
    with TestClient(web, base_url="http://127.0.0.1:8080", raise_server_exceptions=False) as c:
        body = '{"name": "s", "data": ' + "[" * 100_000 + "]" * 100_000 + "}"
        answer = c.post(f"{PREFIX}/signals", content=body,
                        headers={"Authorization": "Bearer t0ken"})  # fmt: skip
    assert answer.status_code == 400, answer.text
