"""The ledger and the business table: what the soak's step bodies leave behind.

Every step body appends one line per execution to a ledger file of its worker process,
outside the database, so the ledger survives database restarts and shows every execution,
even one a kill cut short. `step.transaction` bodies write one row each into the business
table (`chaos_biz.effects` on PostgreSQL, `chaos_effects` on SQLite), which has no unique
key, so a duplicate stays visible.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg

from durably import StepContext

WORKER = os.environ.get("WORKER_NAME", "soak")

_ledger_fd: int | None = None


def note(ctx: StepContext, event: str) -> None:
    """Append one execution event of a step body to this process's ledger file.

    One `write` on an O_APPEND descriptor: lines of concurrent bodies never interleave, and
    a line is in the file once the call returns, whatever happens to the process next.
    """
    global _ledger_fd
    if _ledger_fd is None:
        path = Path(os.environ["CHAOS_LEDGER"]) / f"{WORKER}-{os.getpid()}.jsonl"
        _ledger_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    line = {"run": ctx.run_id, "step": ctx.step, "attempt": ctx.attempt, "fence": ctx.fence.fence,
            "worker": WORKER, "pid": os.getpid(), "event": event, "t": time.time()}  # fmt: skip
    os.write(_ledger_fd, (json.dumps(line) + "\n").encode())


def read_ledger(directory: Path) -> list[dict[str, Any]]:
    """Every ledger line the workers wrote (a line cut by a kill is skipped)."""
    lines = []
    for path in sorted(directory.glob("*.jsonl")):
        for text in path.read_text().splitlines():
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError:
                continue
    return lines


def _sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def setup_business(url: str) -> None:
    """The application's own table (no unique key: a duplicate must stay visible)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(url), timeout=30) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS chaos_effects (run_id TEXT, step TEXT)")
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS chaos_biz")
        conn.execute("CREATE TABLE IF NOT EXISTS chaos_biz.effects (run_id text, step text)")


def read_effects(url: str) -> list[tuple[str, str]]:
    if url.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(url), timeout=30) as conn:
            return [(r, s) for r, s in conn.execute("SELECT run_id, step FROM chaos_effects")]
    with psycopg.connect(url) as conn:
        return [(r, s) for r, s in conn.execute("SELECT run_id, step FROM chaos_biz.effects")]
