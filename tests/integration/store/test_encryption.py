"""Encryption at rest (SPEC §4.24) on both backends: a run that touches every payload path
(input, step results, a retried step's error, a run's error, signal data sent by a client
and by a workflow, request data and its answer, events, stream values, a child's input and
output) reads back exactly as written, while a dump of the database (`pg_dump`; the
SQLite file's bytes) holds none of the plaintexts. The first key encrypts and any key
decrypts; an app without the key reads "<encrypted>" and its worker holds such a run; an
idempotent start compares what the inputs decrypt to; plaintext written before (or by SQL)
reads as it is; the payload limit applies to what is stored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from durably import (
    Durably,
    FernetCodec,
    IdempotencyConflictError,
    PayloadTooLarge,
    RetryPolicy,
    WorkflowContext,
)
from durably.core.sealing import ENCRYPTED, MARKER
from tests.helpers import duration, eventually, scaled

KEY_A = FernetCodec.generate_key()
KEY_B = FernetCodec.generate_key()
SECRETS = {
    "input": "S3CR3T-INPUT-a1", "step": "S3CR3T-STEP-b2", "retried": "S3CR3T-RETRIED-c3",
    "signal": "S3CR3T-SIGNAL-d4", "sent": "S3CR3T-SENT-e5", "request": "S3CR3T-REQUEST-f6",
    "answer": "S3CR3T-ANSWER-g7", "event": "S3CR3T-EVENT-h8", "stream": "S3CR3T-STREAM-i9",
    "child_in": "S3CR3T-CHILDIN-j0", "child_out": "S3CR3T-CHILDOUT-k1",
    "output": "S3CR3T-OUTPUT-l2", "failure": "S3CR3T-FAILURE-m3",
}  # fmt: skip
ONCE = RetryPolicy(max_attempts=1)


def _app(url: str, codec: Any) -> Durably:
    app = Durably(url, codec=codec)
    calls = {"flaky": 0}

    @app.workflow(name="child", version="v1")
    async def child(ctx: WorkflowContext, value: str) -> str:
        return SECRETS["child_out"] if value == SECRETS["child_in"] else "wrong"

    @app.workflow(name="everything", version="v1")
    async def everything(ctx: WorkflowContext, secret: dict[str, Any]) -> dict[str, Any]:
        step = await ctx.step.run("step", lambda: {"s": SECRETS["step"], "f": 0.1, "z": 1})

        def flaky() -> str:
            calls["flaky"] += 1
            if calls["flaky"] == 1:
                raise ValueError(SECRETS["retried"])
            return "ok"

        await ctx.step.run("flaky", flaky, retry=RetryPolicy(initial_interval="10ms"))
        signal = await ctx.step.wait_for_signal("go", timeout=duration(30))
        await ctx.step.send_signal("note", {"n": SECRETS["sent"]})
        await ctx.step.set_event("progress", {"e": SECRETS["event"]})
        await ctx.step.write_stream("out", {"v": SECRETS["stream"]})
        request = await ctx.step.wait_for_request("ask", timeout=duration(30))
        assert request is not None
        await ctx.step.reply(request, {"a": SECRETS["answer"], "echo": request.data})
        got = await ctx.step.run_workflow(child, SECRETS["child_in"])
        return {"out": SECRETS["output"], "in": secret, "step": step, "sig": signal, "c": got}

    @app.workflow(name="fails", version="v1", retry=ONCE)
    async def fails(ctx: WorkflowContext) -> None:
        raise RuntimeError(SECRETS["failure"])

    return app


async def _touch_every_path(app: Durably) -> tuple[str, dict[str, Any]]:
    everything, fails = app.workflows["everything", "v1"], app.workflows["fails", "v1"]
    handle = await everything.start({"k": SECRETS["input"], "f": 1e23, "b": 1, "a": 2})
    failing = await fails.start()
    async with app.worker():
        await eventually(lambda: _status(app, handle.run_id, "waiting"), what="the wait")
        await app.send_signal("go", {"g": SECRETS["signal"]})
        answer = await app.request(handle.run_id, "ask", {"q": SECRETS["request"]},
                                   timeout=scaled(30))  # fmt: skip
        assert answer == {"a": SECRETS["answer"], "echo": {"q": SECRETS["request"]}}
        output = await handle.result(timeout=scaled(30))
        await eventually(lambda: _status(app, failing.run_id, "failed"), what="the failure")
    return handle.run_id, output


async def _status(app: Durably, run_id: str, status: str) -> bool:
    return (await app.get_run(run_id)).status == status


def _dump(url: str, tmp_path: Path) -> bytes:
    if url.startswith("sqlite"):
        files = sorted(tmp_path.glob("durably.db*"))  # the -wal file too
        assert files
        return b"".join(f.read_bytes() for f in files)
    parts = urlsplit(url)
    return subprocess.run(
        ["pg_dump", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432),
         "-U", parts.username or "postgres", parts.path.lstrip("/")],
        check=True, capture_output=True, timeout=scaled(60),
    ).stdout  # fmt: skip


async def test_no_plaintext_at_rest_and_every_value_reads_back_exactly(
    db_url: str, tmp_path: Path
) -> None:
    app = _app(db_url, FernetCodec([KEY_A]))
    async with app:
        run_id, output = await _touch_every_path(app)
        assert output == {
            "out": SECRETS["output"], "in": {"k": SECRETS["input"], "f": 1e23, "b": 1, "a": 2},
            "step": {"s": SECRETS["step"], "f": 0.1, "z": 1}, "sig": {"g": SECRETS["signal"]},
            "c": SECRETS["child_out"],
        }  # fmt: skip
        run = await app.get_run(run_id)
        assert list(run.input) == ["k", "f", "b", "a"]  # key order kept
        assert run.output == output
        steps = {s.step: s for s in await app.list_steps(run_id)}
        assert steps["step"].output == {"s": SECRETS["step"], "f": 0.1, "z": 1}
        assert SECRETS["retried"] in str([s.error for s in await app.list_steps(run_id)])
        assert await app.get_event(run_id, "progress") == {"e": SECRETS["event"]}
        assert [v async for v in app.read_stream(run_id, "out")] == [{"v": SECRETS["stream"]}]
        notes = await app.list_signals("note")
        assert [s["data"] for s in notes] == [{"n": SECRETS["sent"]}]
        [failed] = await app.list_runs(workflow="fails")
        assert SECRETS["failure"] in str(failed.error)
    dump = _dump(db_url, tmp_path)
    assert MARKER.encode() in dump
    leaked = [name for name, secret in SECRETS.items() if secret.encode() in dump]
    assert leaked == []


async def test_rotation_first_key_encrypts_any_decrypts_without_key_encrypted(
    db_url: str,
) -> None:
    old = _app(db_url, FernetCodec([KEY_A]))
    async with old:
        handle = await old.workflows["child", "v1"].start(SECRETS["child_in"])
        async with old.worker():
            assert await handle.result(timeout=scaled(30)) == SECRETS["child_out"]
    rotated = _app(db_url, FernetCodec([KEY_B, KEY_A]))
    async with rotated:  # reads what the old key wrote, writes with the new one
        assert (await rotated.get_run(handle.run_id)).output == SECRETS["child_out"]
        newer = await rotated.workflows["child", "v1"].start(SECRETS["child_in"])
    only_b = _app(db_url, FernetCodec([KEY_B]))
    async with only_b:
        assert (await only_b.get_run(newer.run_id)).input == SECRETS["child_in"]
        assert (await only_b.get_run(handle.run_id)).input == ENCRYPTED
    keyless = _app(db_url, None)
    async with keyless:
        run = await keyless.get_run(handle.run_id)
        assert (run.input, run.output) == (ENCRYPTED, ENCRYPTED)
        assert {s.output for s in await keyless.list_steps(handle.run_id)} <= {ENCRYPTED, None}
        async with keyless.worker():  # holds the run it cannot read, never runs it
            await eventually(lambda: _status(keyless, newer.run_id, "held"), what="a hold")
        held = await keyless.get_run(newer.run_id)
        assert "lacks" in str(held.error)
    async with only_b:
        assert (await only_b.get_run(newer.run_id)).status == "held"  # not failed


async def test_idempotent_start_compares_decrypted_inputs(db_url: str) -> None:
    app = _app(db_url, FernetCodec([KEY_A]))
    child = app.workflows["child", "v1"]
    async with app:
        first = await child.start(SECRETS["child_in"], idempotency_key="k")
        again = await child.start(SECRETS["child_in"], idempotency_key="k")
        assert again.run_id == first.run_id
        with pytest.raises(IdempotencyConflictError):
            await child.start("other", idempotency_key="k")
    rotated = _app(db_url, FernetCodec([KEY_B, KEY_A]))
    async with rotated:  # the same input under a new key is still the same input
        third = await rotated.workflows["child", "v1"].start(
            SECRETS["child_in"], idempotency_key="k"
        )
        assert third.run_id == first.run_id


async def test_plaintext_written_before_encryption_keeps_working(db_url: str) -> None:
    plain = _app(db_url, None)
    async with plain:
        handle = await plain.workflows["child", "v1"].start(SECRETS["child_in"])
    encrypted = _app(db_url, FernetCodec([KEY_A]))
    async with encrypted, encrypted.worker():
        await eventually(lambda: _status(encrypted, handle.run_id, "completed"), what="its end")
        run = await encrypted.get_run(handle.run_id)
        assert (run.input, run.output) == (SECRETS["child_in"], SECRETS["child_out"])


async def test_the_payload_limit_applies_to_what_is_stored(db_url: str) -> None:
    app = Durably(db_url, codec=FernetCodec([KEY_A]), max_payload_bytes=1000)

    @app.workflow(name="echo", version="v1")
    async def echo(ctx: WorkflowContext, value: str) -> str:
        return value

    async with app:
        await echo.start("x" * 600)  # 602 bytes of JSON: fits in plaintext, and sealed
        with pytest.raises(PayloadTooLarge, match="as stored, encrypted"):
            await echo.start("x" * 800)  # 802 bytes of JSON, well over 1000 sealed
        assert len(await app.list_runs()) == 1  # nothing written


async def test_a_run_started_from_sql_is_plaintext_and_runs_encrypted(pg_url: str) -> None:
    """`durably.start_run` cannot encrypt: its input is stored as given, read as it is,
    and what the run writes after is encrypted."""
    app = _app(pg_url, FernetCodec([KEY_A]))
    async with app:
        await app.migrate()
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT durably.start_run('child', 'v1', CAST(%s AS jsonb))",
                (json.dumps(SECRETS["child_in"]),),
            )
            [(run_id,)] = await cur.fetchall()
        async with app.worker():
            await eventually(lambda: _status(app, run_id, "completed"), what="its end")
        run = await app.get_run(run_id)
        assert (run.input, run.output) == (SECRETS["child_in"], SECRETS["child_out"])
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT input::text, output::text FROM durably.runs WHERE id = %s", (run_id,)
            )
            [(stored_input, stored_output)] = await cur.fetchall()
    assert json.loads(stored_input) == SECRETS["child_in"]  # as SQL wrote it
    assert json.loads(stored_output).startswith(MARKER)
