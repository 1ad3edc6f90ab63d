"""The CLI of operating runs (§5): --version, global options after the subcommand, run-id
prefixes, start --wait progress, signals, purge."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from durably import Durably
from durably.store.records import NewRun
from tests.acceptance.conftest import ROOT, Procs
from tests.helpers import run_command
from tests.processes import Processes

APP = "tests.apps.operating:app"


def _bare_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLY_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


async def _two_runs_sharing_a_prefix(url: str) -> None:
    async with Durably(url) as app:
        for suffix in ("1", "2"):
            await app.create_run(NewRun("report", "v1", "1", 1, run_id=f"abcdef0123{suffix}"))


def test_version_and_global_options_after_the_subcommand(
    procs: Procs, tmp_path: Path, processes: Processes
) -> None:
    env = _bare_env()
    done = run_command("durably.cli", ("--version",), env, ROOT, check=True)
    assert done.stdout.startswith("durably ") and done.stdout.split()[1][0].isdigit()

    log = tmp_path / "w.log"
    cmd = [sys.executable, "-m", "durably.cli", "worker", "--app", APP, "--database",
           procs.url, "--id", "late-options"]  # fmt: skip
    processes.start(cmd, log, env=env, cwd=ROOT)
    started = run_command("durably.cli", (
        "start", "report", "--input", "3", "--wait", "--json", "--app", APP,
        f"--database={procs.url}",
    ), env, ROOT, check=True)  # fmt: skip
    assert '"status": "completed"' in started.stdout
    assert "step 'part-2' (function) attempt 1 completed" in started.stderr
    assert 'event progress = {"done": 3, "of": 3}' in started.stderr
    # The first status shown is the one the first look finds: a worker may have claimed
    # the run already (the CI of b3b7673 saw "running").
    assert started.stderr.splitlines()[0].endswith((": pending", ": running"))
    assert any(line.endswith(": completed") for line in started.stderr.splitlines())


def test_show_prefix_signals_and_purge(procs: Procs) -> None:
    env: dict[str, Any] = {"DURABLY_APP": APP}
    asyncio.run(_two_runs_sharing_a_prefix(procs.url))
    assert procs.json("show", "abcdef01231", **env)["run"]["run_id"] == "abcdef01231"
    assert procs.json("show", "abcdef01232"[:11], **env)["run"]["run_id"] == "abcdef01232"
    ambiguous = procs.cli("show", "abcdef0123", check=False, **env)
    assert ambiguous.returncode == 2
    assert "abcdef01231" in ambiguous.stderr and "abcdef01232" in ambiguous.stderr
    short = procs.cli("show", "abc", check=False, **env)
    assert short.returncode == 2 and "8 or more" in short.stderr

    text = procs.cli("signal", "donwload-done:d1", "--data", "1", **env).stdout
    assert "donwload-done:d1" in text and "buffered" in text
    procs.json("signal", "other", "--expires", "1 day", **env)
    listed = procs.json("signals", **env)
    assert [s["name"] for s in listed] == ["donwload-done:d1", "other"]
    assert listed[1]["expires_at"] is not None
    assert [s["name"] for s in procs.json("signals", "--name", "other", **env)] == ["other"]
    bad = procs.cli("signal", "x", "--expires", "soon", check=False, **env)
    assert bad.returncode == 2 and len(procs.json("signals", "--all", **env)) == 2

    bad = procs.cli("purge", "--older-than", "30 parsecs", check=False, **env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --older-than")
    bad = procs.cli("purge", "--older-than", "0s", "--status", "waiting", check=False, **env)
    assert bad.returncode == 2
    procs.cli("cancel", "abcdef01231", **env)
    assert procs.json("purge", "--older-than", "30d", **env) == {"runs": 0, "signals": 0}
    assert procs.json("purge", "--older-than", "0s", **env) == {"runs": 1, "signals": 0}
    assert [r["run_id"] for r in procs.json("runs", **env)] == ["abcdef01232"]
    resumed = procs.cli("resume", "abcdef01232", check=False, **env)
    assert resumed.returncode == 2 and "pending" in resumed.stderr
    by_prefix = procs.cli("resume", "abcdef0123", check=False, **env)  # unique once purged
    assert by_prefix.returncode == 2 and "run abcdef01232 is pending" in by_prefix.stderr


def test_show_by_idempotency_key(procs: Procs) -> None:
    """A run is found by the business id it was started with; a key that started runs of
    two workflows needs --workflow."""
    for workflow in ("acquire", "flaky"):
        data = '{"id": "k1"}' if workflow == "acquire" else "0"
        procs.cli("start", workflow, "--input", data, "--idempotency-key", "order-42",
                  "--available-at", "+1h")  # fmt: skip
    ours = procs.json("runs", "--workflow", "acquire")[0]["run_id"]
    shown = procs.json("show", "--key", "order-42", "--workflow", "acquire")
    assert shown["run"]["run_id"] == ours and set(shown) == {"run", "steps", "events"}
    assert ours in procs.cli("show", "--key", "order-42", "--workflow", "acquire").stdout

    both = procs.cli("show", "--key", "order-42", check=False)
    assert both.returncode == 2, both.stderr
    assert "acquire, flaky" in both.stderr and "--workflow" in both.stderr
    assert len(both.stderr.strip().splitlines()) == 1
    missing = procs.cli("show", "--key", "order-43", check=False)
    assert missing.returncode == 2 and "no run" in missing.stderr and "order-43" in missing.stderr
    for args in ((ours, "--key", "order-42"), (), ("--workflow", "acquire")):
        wrong = procs.cli("show", *args, check=False)
        assert wrong.returncode == 2 and "a run id or --key" in wrong.stderr, wrong.stderr


def test_purge_one_workflows_runs(procs: Procs) -> None:
    env: dict[str, Any] = {"DURABLY_APP": APP}
    started: dict[str, list[str]] = {}
    for workflow in ("report", "report", "billing"):
        run = procs.json("start", workflow, "--input", "1", "--available-at", "+1h", **env)
        procs.cli("cancel", run["run_id"], **env)
        started.setdefault(workflow, []).append(run["run_id"])
    kept = procs.json("purge", "--older-than", "0s", "--workflow", "report", "--status",
                      "completed", **env)  # fmt: skip
    assert kept == {"runs": 0, "signals": 0}  # the filters combine: none completed
    done = procs.json("purge", "--older-than", "0s", "--workflow", "report", **env)
    assert done == {"runs": 2, "signals": 0}
    assert [r["run_id"] for r in procs.json("runs", **env)] == started["billing"]
    text = procs.cli("purge", "--older-than", "0s", "--workflow", "nope", **env).stdout
    assert text.startswith("purged 0 runs")
