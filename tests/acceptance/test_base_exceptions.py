"""User code that raises what is not an `Exception` (SPEC §4.20), on a real worker process:
`SystemExit` (argparse, click), `KeyboardInterrupt`, `GeneratorExit` or a `BaseException` of
the application's own, raised by a step body (sync, async), a transaction body, a
compensation or the workflow function (async, sync), is a failure of that step or workflow,
retried by policy and stored as any failure; the worker lives on and runs the next run."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from durably import SyncDurably
from tests.acceptance.conftest import Procs
from tests.apps import exits
from tests.helpers import eventually_sync, scaled

APP = "tests.apps.exits:app"
STEP_CASES = [("exit", "sync"), ("exit", "async"), ("exit", "instant"), ("interrupt", "sync"),
              ("interrupt", "async"), ("generator-exit", "async"), ("custom", "sync")]  # fmt: skip
TYPES = {"exit": "SystemExit", "interrupt": "KeyboardInterrupt",
         "generator-exit": "GeneratorExit", "custom": "Custom"}  # fmt: skip


@pytest.fixture
def client(procs: Procs) -> Iterator[SyncDurably]:
    app = exits.app.rebind(procs.url)
    yield app.sync
    app.sync.close()


def _ran(log: Path) -> tuple[Counter[tuple[str, str]], set[str]]:
    """How often each (run, body) ran, and the processes it ran in."""
    lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return Counter((run, what) for run, what, _ in lines), {pid for *_, pid in lines}


def test_base_exceptions_from_user_code_fail_by_policy_and_never_stop_the_worker(
    procs: Procs, client: SyncDurably, tmp_path: Path
) -> None:
    log = tmp_path / "ran.log"
    worker = procs.worker("A", "--concurrency", "4", DURABLY_APP=APP, RAN_LOG=str(log))
    steps = {case: client.start("step", {"kind": case[0], "body": case[1]}).run_id
             for case in STEP_CASES}  # fmt: skip
    flows = {(name, kind): client.start(name, kind).run_id
             for name in ("flow", "sync-flow") for kind in ("exit", "interrupt")}  # fmt: skip
    tx = client.start("tx", "exit").run_id
    saga = client.start("saga").run_id

    ids = [*steps.values(), *flows.values(), tx, saga]
    eventually_sync(lambda: worker.poll() is not None or all(client.get_run(r).done for r in ids),
                    timeout=60, what="every run to end")  # fmt: skip
    assert worker.poll() is None, procs.log("A")[-3000:]
    runs = {run_id: client.get_run(run_id) for run_id in ids}
    ran, pids = _ran(log)
    for (kind, body), run_id in steps.items():
        run = runs[run_id]
        assert run.status == "failed", (kind, body, run.error)
        assert run.error is not None and run.error["type"] == "StepFailedError"
        cause = run.error["cause"]
        assert cause["type"] == TYPES[kind] and "Traceback" in cause["traceback"], cause
        assert "after 2 attempts" in run.error["message"], run.error
        assert ran[(run_id, "raise")] == 2, (kind, body)  # the policy's 2, not once per claim
        attempts = [(s.attempt, s.status, (s.error or {}).get("type"))
                    for s in client.list_steps(run_id)]  # fmt: skip
        assert attempts == [(1, "failed", TYPES[kind]), (2, "failed", TYPES[kind])]
    for (name, kind), run_id in flows.items():
        run = runs[run_id]
        assert run.status == "failed" and run.attempts == 2, (name, kind, run.error)
        assert run.error is not None and run.error["type"] == TYPES[kind], run.error
        assert "Traceback" in run.error["traceback"]
        assert ran[(run_id, name)] == 2
    assert runs[tx].status == "failed" and ran[(tx, "tx")] == 2
    assert json.dumps(runs[tx].error).count("SystemExit") >= 1, runs[tx].error
    # The saga's compensation raised SystemExit once, then completed on its second try.
    assert runs[saga].status == "failed"
    assert ran[(saga, "compensate:reserve")] == 2 and ran[(saga, "charge")] == 2
    undo = [(s.attempt, s.status) for s in client.list_steps(saga) if s.position < 0]
    assert undo == [(1, "failed"), (2, "completed")]

    # Still the same worker process, and it goes on to complete another run.
    ok = client.wait(client.start("ok").run_id, timeout=scaled(30))
    assert ok.status == "completed" and ok.output == "ok"
    assert worker.poll() is None
    assert _ran(log)[1] == pids == {str(worker.pid)}


CHECKED_KINDS = ["exit", "interrupt", "custom"]


def test_base_exceptions_from_validators_of_declared_types_fail_by_policy(
    procs: Procs, client: SyncDurably, tmp_path: Path
) -> None:
    """A validator of a step's declared result type, of a child's result type or of the
    workflow's input model is user code: what it raises fails the run by its policy
    (compensations run), as if the workflow had raised it at that await."""
    log = tmp_path / "ran.log"
    worker = procs.worker("A", "--concurrency", "4", DURABLY_APP=APP, RAN_LOG=str(log))
    runs = {(name, kind): client.start(name, kind if name != "checked-input" else
                                       {"kind": kind}).run_id
            for name in ("checked-step", "checked-child", "checked-input")
            for kind in CHECKED_KINDS}  # fmt: skip
    eventually_sync(
        lambda: worker.poll() is not None or all(client.get_run(r).done for r in runs.values()),
        timeout=60, what="every run to end",
    )  # fmt: skip
    assert worker.poll() is None, procs.log("A")[-3000:]
    ran, pids = _ran(log)
    for (name, kind), run_id in runs.items():
        run = client.get_run(run_id)
        assert (run.status, run.attempts) == ("failed", 2), (name, kind, run.error)
        assert run.error is not None and run.error["type"] == TYPES[kind], (name, kind, run.error)
        if name == "checked-step":  # its first step is undone, once
            assert ran[(run_id, "compensate:reserve")] == 1, (kind, ran)
    ok = client.wait(client.start("ok").run_id, timeout=scaled(30))
    assert ok.status == "completed" and worker.poll() is None
    assert pids == {str(worker.pid)}


def test_an_error_whose_message_raises_fails_by_policy(
    procs: Procs, client: SyncDurably, tmp_path: Path
) -> None:
    """Describing an error to store it calls its `__str__`, user code: what that raises
    is not the worker's end; the error is stored with a placeholder for its message."""
    log = tmp_path / "ran.log"
    worker = procs.worker("A", DURABLY_APP=APP, RAN_LOG=str(log))
    runs = {where: client.start("unprintable", where).run_id for where in ("step", "flow")}
    eventually_sync(
        lambda: worker.poll() is not None or all(client.get_run(r).done for r in runs.values()),
        timeout=60, what="every run to end",
    )  # fmt: skip
    assert worker.poll() is None, procs.log("A")[-3000:]
    step, flow = (client.get_run(runs[where]) for where in ("step", "flow"))
    assert (flow.status, flow.attempts) == ("failed", 2), flow.error
    assert flow.error is not None and flow.error["type"] == "Unprintable", flow.error
    assert "str() raised SystemExit" in flow.error["message"], flow.error
    assert (step.status, step.attempts) == ("failed", 2), step.error
    assert step.error is not None and step.error["cause"]["type"] == "Unprintable", step.error
    assert _ran(log)[0][(runs["step"], "unprintable")] == 4  # 2 attempts of each of 2 runs
