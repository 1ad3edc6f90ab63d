"""Encryption at rest (SPEC §4.24) in the dashboard and the HTTP API: served by an app
without the key, the pages and the API's documents show "<encrypted>" for the values (and
never fail); with the key, the values."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

from durably import Durably, FernetCodec, RetryPolicy
from durably.core.sealing import ENCRYPTED
from durably.dashboard.auth import Auth
from tests.dashboard.conftest import serving
from tests.helpers import eventually, scaled

KEY = FernetCodec.generate_key()
SECRET = "S3CR3T-DASHBOARD-z9"


def _app(url: str, codec: FernetCodec | None) -> Durably:
    app = Durably(url, codec=codec)

    @app.workflow(name="secret", version="v1", retry=RetryPolicy(max_attempts=1))
    async def secret(ctx: Any, value: str) -> str:
        await ctx.step.set_event("seen", {"v": value})
        await ctx.step.run("echo", lambda: value)
        raise ValueError(f"failed on {value}")

    return app


async def _write(url: str) -> str:
    writer = _app(url, FernetCodec([KEY]))
    async with writer:
        handle = await writer.start("secret", SECRET)
        await writer.send_signal("buffered", {"s": SECRET})
        async with writer.worker():
            await eventually(lambda: _failed(writer, handle.run_id), what="the run's end")
    return handle.run_id


async def _failed(app: Durably, run_id: str) -> bool:
    return (await app.get_run(run_id)).status == "failed"


def _get(url: str, **headers: str) -> str:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=scaled(10)) as resp:
        assert resp.status == 200
        return str(resp.read().decode())


def test_pages_and_api_show_encrypted_without_the_key_and_values_with_it(db_url: str) -> None:
    run_id = asyncio.run(_write(db_url))
    cookie = {"Cookie": f"durably_token={Auth('t0ken').session()}"}
    bearer = {"Authorization": "Bearer t0ken"}
    for codec, shown in ((None, ENCRYPTED), (FernetCodec([KEY]), SECRET)):
        app = _app(db_url, codec)
        try:
            with serving(app, "t0ken") as base:
                pages = [_get(f"{base}/", **cookie), _get(f"{base}/runs/{run_id}", **cookie)]
                run = json.loads(_get(f"{base}/api/v1/runs/{run_id}", **bearer))
                runs = json.loads(_get(f"{base}/api/v1/runs", **bearer))
        finally:
            app.sync.close()
        assert all(SECRET not in p for p in pages) == (codec is None)
        assert run["input"] == shown and run["status"] == "failed"
        assert (SECRET in json.dumps(run["error"])) == (codec is not None)
        assert [r["input"] for r in runs] == [shown]
        if codec is None:
            assert "&lt;encrypted&gt;" in pages[1]
