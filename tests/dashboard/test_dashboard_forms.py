"""The dashboard's forms as plain HTTP posts (no browser): what it refuses, it stores
nothing of; on both backends."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

import pytest

from durably.dashboard.auth import Auth
from tests.dashboard.conftest import serving
from tests.dashboard.test_dashboard import make_app
from tests.helpers import scaled


def _post(base: str, path: str, token: str, fields: dict[str, str]) -> urllib.error.HTTPError:
    auth = Auth(token)
    form = urllib.parse.urlencode({"csrf": auth.csrf(), **fields}).encode()
    request = urllib.request.Request(f"{base}{path}", data=form, method="POST",
                                     headers={"Cookie": auth.cookie_header()})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=scaled(10))
    return err.value


@pytest.mark.parametrize("name", ["", "   "])
def test_a_signal_without_a_name_is_refused_and_nothing_stored(db_url: str, name: str) -> None:
    app = make_app(db_url)
    try:
        with serving(app, "t0ken") as base:
            refused = _post(base, "/signal", "t0ken", {"name": name})
            with refused:
                assert refused.code == 400
                assert "a signal needs a name" in refused.read().decode()
            assert app.sync.list_signals(pending=False) == []
    finally:
        app.sync.close()
