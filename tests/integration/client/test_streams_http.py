"""`GET /api/v1/runs/{id}/streams/{key}` (§4.21, §4.25): a run's stream as server-sent
events, from `?from=N` or after `Last-Event-ID`, ending with an `end` event."""

from __future__ import annotations

from typing import Any

import httpx

from durably import Durably
from durably.web.app import PREFIX, create_app
from durably.web.guard import HostAllowList
from tests.helpers import scaled

TOKEN = "s3cret-token"


def _events(text: str) -> list[dict[str, str]]:
    found = []
    for block in text.strip().split("\n\n"):
        found.append(dict(line.split(": ", 1) for line in block.splitlines()))
    return found


async def test_a_stream_as_server_sent_events(db_url: str) -> None:
    app = Durably(db_url)

    @app.workflow(name="sse", version="v1")
    async def sse(ctx: Any) -> None:
        for value in ("a", {"b": [1, 2]}, None):
            await ctx.step.write_stream("out", value)
        await ctx.step.close_stream("out")

    async with app:
        handle = await sse.start()
        async with app.worker():
            await handle.wait(timeout=scaled(10))
        web = create_app(app, TOKEN, HostAllowList.of("127.0.0.1", 8080))
        transport = httpx.ASGITransport(app=web)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080",
                                     headers=headers) as http:  # fmt: skip
            path = f"{PREFIX}/runs/{handle.run_id}/streams/out"
            answer = await http.get(path)
            assert answer.status_code == 200, answer.text
            assert answer.headers["content-type"].startswith("text/event-stream")
            assert _events(answer.text) == [
                {"id": "0", "data": '"a"'}, {"id": "1", "data": '{"b": [1, 2]}'},
                {"id": "2", "data": "null"}, {"event": "end", "data": "null"},
            ]  # fmt: skip
            later = _events((await http.get(path, params={"from": "2"})).text)
            assert later == [{"id": "2", "data": "null"}, {"event": "end", "data": "null"}]
            resumed = await http.get(path, headers={"Last-Event-ID": "0"})
            assert [e.get("id") for e in _events(resumed.text)] == ["1", "2", None]
            assert (await http.get(path, params={"from": "-1"})).status_code == 400
            assert (await http.get(path, params={"form": "1"})).status_code == 400
            missing = await http.get(f"{PREFIX}/runs/nope/streams/out")
            assert missing.status_code == 404 and "no run" in missing.json()["error"]


async def test_numbers_past_a_64_bit_integer_answer_400(db_url: str) -> None:
    """`?from=`, `?limit=`, `?offset=` and `Last-Event-ID` beyond what SQL's integers hold
    are the client's mistake (400), not the driver's overflow mid-answer."""
    app = Durably(db_url)

    @app.workflow(name="sse", version="v1")
    async def sse(ctx: Any) -> None:
        await ctx.step.write_stream("out", "a")

    huge = str(2**63)
    async with app:
        handle = await sse.start()
        async with app.worker():
            await handle.wait(timeout=scaled(10))
        web = create_app(app, TOKEN, HostAllowList.of("127.0.0.1", 8080))
        transport = httpx.ASGITransport(app=web)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080",
                                     headers=headers) as http:  # fmt: skip
            path = f"{PREFIX}/runs/{handle.run_id}/streams/out"
            assert (await http.get(path, params={"from": huge})).status_code == 400
            assert (await http.get(path, headers={"Last-Event-ID": huge})).status_code == 400
            for name in ("limit", "offset"):
                for number in (huge, "9" * 5000):  # past int()'s 4300 digits too
                    answer = await http.get(f"{PREFIX}/runs", params={name: number})
                    assert answer.status_code == 400, (name, answer.status_code, answer.text)
