"""The `durably` CLI as a user drives it: JSON documents, exit codes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.conftest import APP, Procs
from tests.helpers import eventually_sync
from tests.processes import Processes


def test_json_documents(procs: Procs, tmp_path: Path) -> None:
    payload = tmp_path / "input.json"
    payload.write_text('{"id": "f1"}')
    started = procs.json("start", "acquire", "--input", f"@{payload}", "--available-at", "+1h")
    assert set(started) == {"run_id", "status", "version"}
    run_id = started["run_id"]
    runs = procs.json("runs", "--status", "pending", "--workflow", "acquire")
    assert [r["run_id"] for r in runs] == [run_id]
    required = {"run_id", "workflow", "version", "status", "attempts", "input", "output", "error",
                "fence", "worker_id", "available_at", "created_at", "finished_at"}  # fmt: skip
    assert required <= set(runs[0])
    shown = procs.json("show", run_id)
    assert shown["run"]["input"] == {"id": "f1"} and shown["steps"] == []
    canceled = procs.json("cancel", run_id)
    assert canceled["status"] == "canceled" and canceled["run_id"] == run_id
    human = procs.cli("show", run_id).stdout
    assert run_id in human and "canceled" in human


BAD_INPUT = [
        (("start", "acquire", "--input", "{bad"), "not valid JSON"),
        (("start", "acquire", "--input", "@/nonexistent.json"), "cannot read"),
        (("start", "acquire", "--input", '{"idx": 1}'), "invalid"),
        (("start", "nope", "--input", "{}"), "unknown workflow"),
        (("start", "acquire", "--input", '{"id": "x"}', "--available-at", "soon"), "not a time"),
        (("signal", "x", "--data", "[1,"), "not valid JSON"),
        (("signal", "x", "--run", "no-such-run"), "no run"),
        (("cancel", "no-such-run"), "no run"),
        (("show", "no-such-run"), "no run"),
        (("runs", "--status", "sleeping"), "--status must be one of"),
        (("worker", "--lease", "forever"), "not a duration"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), BAD_INPUT)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    procs: Procs, args: tuple[str, ...], message: str
) -> None:
    done = procs.cli(*args, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert procs.json("runs") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("start", "sleeper", "--input", "NaN"), "--input is not valid JSON: NaN has no JSON form"),
        (("start", "sleeper", "--input", "Infinity"), "Infinity has no JSON form"),
        (("start", "sleeper", "--input", "-Infinity"), "-Infinity has no JSON form"),
        (("start", "slow", "--input", '"a\\u0000b"'), "--input holds a NUL character"),
        (("start", "acquire", "--input", '{"id": "a\\u0000b"}'), "holds a NUL character"),
        (("signal", "x", "--data", "NaN"), "--data is not valid JSON: NaN has no JSON form"),
        (("signal", "x", "--data", '{"a": [Infinity]}'), "Infinity has no JSON form"),
        (("signal", "x", "--data", '"\\u0000"'), "--data holds a NUL character"),
    ],
)
def test_values_json_cannot_hold_are_one_line_exit_2_and_write_nothing(
    procs: Procs, args: tuple[str, ...], message: str
) -> None:
    done = procs.cli(*args, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert procs.json("runs") == [] and procs.json("signals", "--all") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("purge", "--older-than", "99999999999d"), "longer than 1000 years"),
        (("signal", "x", "--expires", "99999999999d"), "longer than 1000 years"),
        (("start", "acquire", "--input", '{"id": "x"}', "--available-at", "+99999999999d"),
         "longer than 1000 years"),
        (("start", "acquire", "--input", '{"id": "x"}', "--deadline-at", "9999-12-31T23:59-05:00"),
         "years 1000-8999"),
        (("worker", "--grace", "99999999999d"), "longer than 1000 years"),
        (("signal", ""), "a signal needs a name"),
        (("signal", "  ", "--data", "1"), "a signal needs a name"),
    ],
)  # fmt: skip
def test_oversized_durations_and_blank_signal_names_exit_2_and_write_nothing(
    procs: Procs, args: tuple[str, ...], message: str
) -> None:
    done = procs.cli(*args, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert procs.json("runs") == []
    assert procs.json("signals", "--all") == []


@pytest.mark.parametrize(
    "args",
    [args for args, _ in BAD_INPUT if args[0] != "worker"]  # the worker prints no JSON
    + [("runs", "--limit", "0"), ("show", "--key", "k", "--workflow")],  # the parser's
)  # fmt: skip
def test_with_json_an_error_is_one_json_document_on_stderr(
    procs: Procs, args: tuple[str, ...]
) -> None:
    plain = procs.cli(*args, check=False)
    done = procs.cli(*args, "--json", check=False)
    assert done.returncode == plain.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    doc = json.loads(done.stderr)
    assert doc == {"error": doc["error"], "exit": 2}
    if plain.stderr.startswith("error: "):  # the same message (usage errors: typer's box)
        assert plain.stderr == f"error: {doc['error']}\n"
    assert procs.json("runs") == []


def test_with_json_a_failure_exits_1_as_one_json_document(
    tmp_path: Path, processes: Processes
) -> None:
    procs = Procs("postgresql://postgres@127.0.0.1:1/nothing", tmp_path, processes)
    done = procs.cli("runs", "--json", check=False)
    assert done.returncode == 1 and done.stdout == ""
    doc = json.loads(done.stderr)
    assert doc["exit"] == 1 and "unavailable" in doc["error"]


def test_unreachable_database_is_one_line(tmp_path: Path, processes: Processes) -> None:
    procs = Procs("postgresql://postgres@127.0.0.1:1/nothing", tmp_path, processes)
    done = procs.cli("runs", check=False)
    assert done.returncode == 1 and "unavailable" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("app", ["", APP])
def test_read_only_commands_create_no_database(
    tmp_path: Path, app: str, processes: Processes
) -> None:
    procs = Procs(f"sqlite:///{tmp_path}/no/dir/x.db", tmp_path, processes)
    for args in (("runs",), ("show", "0123abcd")):
        done = procs.cli(*args, check=False, DURABLY_APP=app)
        assert done.returncode == 1, done
        assert "cannot open SQLite file" in done.stderr and "it must exist" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "no").exists()


def test_bad_database_url_and_app(tmp_path: Path, processes: Processes) -> None:
    procs = Procs("mysql://x", tmp_path, processes)
    done = procs.cli("runs", check=False)
    assert done.returncode == 2 and "unsupported database URL" in done.stderr
    procs = Procs(f"sqlite:///{tmp_path}/x.db", tmp_path, processes)
    done = procs.cli("--app", "no_such_module:app", "runs", check=False)
    assert done.returncode == 2 and "cannot import" in done.stderr
    procs.cli("--schema", "other", "migrate", DURABLY_APP="")
    listed = procs.cli("--schema", "other", "runs", "--json", DURABLY_APP="")
    assert json.loads(listed.stdout) == []
    done = procs.cli("--schema", "Bad-Name", "runs", check=False, DURABLY_APP="")
    assert done.returncode == 2 and "invalid schema name" in done.stderr


def test_piped_output_is_not_cut_to_80_columns(procs: Procs) -> None:
    # issue 31 item 11: piped to a file (not a terminal), rich cut every table at 80.
    run_id = procs.json("start", "acquire", "--input", '{"id": "piped"}', "--available-at",
                        "+1h")["run_id"]  # fmt: skip
    listed = procs.cli("runs").stdout
    assert run_id in listed, listed
    assert "…" not in listed, listed


def test_start_wait_says_why_a_run_failed(procs: Procs) -> None:
    # issue 31 item 11: "run … failed" and exit 1, and nothing of why.
    procs.worker("W")
    done = procs.cli("start", "flaky", "--input", "5", "--wait", check=False)
    assert done.returncode == 1, done
    assert "failed" in done.stdout
    assert "boom attempt 3" in done.stderr, done.stderr


def test_a_signal_no_run_waits_for_warns_on_stderr(procs: Procs) -> None:
    # issue 31 item 7: a typo in a signal's name was buffered in silence.
    typo = procs.cli("signal", "donwload-done:s1", "--data", "1", "--json")
    assert json.loads(typo.stdout) == {"delivered_to": [], "buffered": True, "duplicate": False}
    [line] = typo.stderr.splitlines()  # with --json, one JSON line, as an error is
    assert json.loads(line)["warning"].startswith("no run is waiting for signal 'donwload-done:s1'")
    human = procs.cli("signal", "donwload-done:s2")
    assert "buffered" in human.stdout and "warning: no run is waiting" in human.stderr
    again = procs.cli("signal", "k", "--idempotency-key", "k1")
    assert "warning" in again.stderr
    assert procs.cli("signal", "k", "--idempotency-key", "k1", "--json").stderr == ""
    # Addressed to a run: it reached one (buffered for its next wait), nothing to warn of.
    run_id = procs.json("start", "acquire", "--input", '{"id": "s3"}', "--available-at",
                        "+1h")["run_id"]  # fmt: skip
    addressed = procs.cli("signal", "download-done:s3", "--run", run_id, "--json")
    assert json.loads(addressed.stdout)["buffered"] and addressed.stderr == ""
    # Delivered to a waiting run: no warning.
    procs.worker("W")
    waiting = procs.json("start", "acquire", "--input", '{"id": "s4"}')["run_id"]
    eventually_sync(lambda: procs.json("show", waiting)["run"]["status"] == "waiting",
                    timeout=20, what="the run waiting for its signal")  # fmt: skip
    delivered = procs.cli("signal", "download-done:s4", "--data", '{"ok": true}', "--json")
    assert json.loads(delivered.stdout)["delivered_to"] == [waiting]
    assert delivered.stderr == ""
