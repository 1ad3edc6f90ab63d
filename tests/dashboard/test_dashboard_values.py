"""The dashboard's JSON fields refuse what JSON cannot hold (SPEC §4.20): HTTP 400, one
clear message, nothing written; on both backends. Plain HTTP, no browser."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from durably import Durably
from durably.dashboard.auth import Auth
from tests.dashboard.conftest import serving
from tests.helpers import scaled

TOKEN = "t0ken"


@pytest.fixture
def board(db_url: str) -> Iterator[tuple[str, Durably, str]]:
    app = Durably(db_url)

    @app.workflow(name="takes", version="v1")
    async def takes(ctx: Any, value: Any) -> None:
        return None

    try:
        with serving(app, TOKEN) as base:
            yield base, app, Auth(TOKEN).csrf()
    finally:
        app.sync.close()


def _post(base: str, path: str, form: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(
        base + path, data=urllib.parse.urlencode(form).encode(), method="POST",
        headers={"Cookie": f"durably_token={Auth(TOKEN).session()}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=scaled(10)) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read().decode()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("NaN", "is not valid JSON: NaN has no JSON form"),
        ("[1, Infinity]", "is not valid JSON: Infinity has no JSON form"),
        ('{"a": -Infinity}', "is not valid JSON: -Infinity has no JSON form"),
        ('"a\\u0000b"', "holds a NUL character"),
        ('{"k\\u0000": 1}', "holds a NUL character"),
    ],
)
def test_a_json_field_json_cannot_hold_is_400_and_writes_nothing(
    board: Any, text: str, message: str
) -> None:
    base, app, csrf = board
    status, body = _post(base, "/start", {"csrf": csrf, "workflow": "takes", "input": text})
    assert status == 400 and f"input {message}" in body
    status, body = _post(base, "/signal", {"csrf": csrf, "name": "go", "data": text})
    assert status == 400 and f"data {message}" in body
    assert app.sync.list_runs() == [] and app.sync.list_signals(pending=False) == []
