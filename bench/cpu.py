"""`uv run python -m bench.cpu --database URL [--runs 3000] [--concurrency 50] [--via sql]
[--codec fernet] [--count]`

CPU time per run of a throughput drain, and of the starts before it (`start_*`: one
client starting the runs one by one), in the worker (this process) and in the
PostgreSQL backends of its database (read from /proc, so the server must run on this
machine; the poller that counts completed runs is one of them, and so is any other client
of that database: give the benchmark a database of its own).
On a machine whose speed drifts, runs per second of one code can vary by 30% within
minutes; CPU per run varies less, so compare two versions by this, alternating them
(A B A B). `--codec fernet` encrypts every payload at rest (a `FernetCodec` of a fresh
key): the cost of encryption. `wal_bytes_per_run` is the WAL the drain wrote
(`pg_current_wal_lsn()` before and after: the whole server's, so on a quiet server only).
`--count` installs `bench.tracing`'s stamps (which cost CPU of their own) and adds the
engine's transactions per run, an autocommit statement counting as one: with group commit,
fewer than one a step. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from durably import FernetCodec

from . import tracing
from .scenarios import SCHEMA, _Reader, make_app, reset

TICKS = os.sysconf("SC_CLK_TCK")


def _backends_cpu(pids: set[int]) -> float:
    """User and system seconds used so far by the processes `pids` (gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


async def _starts(
    app: Any, runs: int, backends: Callable[[], Awaitable[set[int]]], via: str
) -> dict[str, float]:
    """CPU per start of `runs` starts, one after the other, by the client and PostgreSQL:
    the Python client's, or `start_run` called on a connection of its own (`via="sql"`)."""
    async with await psycopg.AsyncConnection.connect(app.url, autocommit=True) as conn:
        query = f"SELECT {SCHEMA}.start_run('bench', 'v1', CAST(%s AS jsonb))"

        async def start(k: int) -> None:
            if via == "sql":
                await conn.execute(query, (str(k),), prepare=True)
            else:
                await app.start("bench", k)

        await app.start("bench", -1)  # the app's pool open, as the worker will find it
        await start(-2)  # the connection opened, its statements prepared
        pids = await backends()
        pg0, py0, t0 = _backends_cpu(pids), time.process_time(), time.perf_counter()
        for k in range(runs - 2):
            await start(k)
        pids |= await backends()
        pg1, py1, t1 = _backends_cpu(pids), time.process_time(), time.perf_counter()
    return {
        "start_client_ms_per_run": round(1000 * (py1 - py0) / (runs - 2), 3),
        "start_postgres_ms_per_run": round(1000 * (pg1 - pg0) / (runs - 2), 3),
        "starts_per_s": round((runs - 2) / (t1 - t0), 1),
    }


async def drain(
    url: str, runs: int, concurrency: int, via: str = "client", codec: str = "none",
    count: bool = False,
) -> dict[str, float]:  # fmt: skip
    await reset(url)
    app = make_app(
        url, codec=FernetCodec([FernetCodec.generate_key()]) if codec != "none" else None
    )
    query = (
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    async with app, await psycopg.AsyncConnection.connect(url, autocommit=True) as monitor:

        async def backends() -> set[int]:
            return {row[0] for row in await (await monitor.execute(query)).fetchall()}

        started = await _starts(app, runs, backends, via)
        tracer = tracing.Tracer()
        counting = tracer.installed() if count else contextlib.nullcontext()
        async with app.worker(concurrency=concurrency), _Reader(app) as reader:
            await asyncio.sleep(0.3)  # the pool's connections opened, the first claims made
            pids = await backends()
            lsn0 = await _lsn_now(monitor)
            with counting:
                pg0, py0, t0 = _backends_cpu(pids), time.process_time(), time.perf_counter()
                first = await reader.completed()
                deadline = time.monotonic() + 300
                while (done := await reader.completed()) < runs:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"only {done} of {runs} runs completed in 300 s")
                    await asyncio.sleep(0.05)
                    pids |= await backends()
                pg1, py1, t1 = _backends_cpu(pids), time.process_time(), time.perf_counter()
            wal = await _wal_since(monitor, lsn0)
    n = max(done - first, 1)
    counted = {"transactions_per_run": round(len(tracer.calls) / n, 2)} if count else {}
    return {
        "runs": n,
        "worker_ms_per_run": round(1000 * (py1 - py0) / n, 3),
        "postgres_ms_per_run": round(1000 * (pg1 - pg0) / n, 3),
        "runs_per_s": round(n / (t1 - t0), 1),
        "wal_bytes_per_run": round(wal / n),
        **counted,
        **started,
    }


async def _lsn_now(monitor: Any) -> Any:
    """The server's WAL position now."""
    return (await (await monitor.execute("SELECT pg_current_wal_lsn()")).fetchone())[0]


async def _wal_since(monitor: Any, lsn: Any) -> float:
    """The bytes of WAL the server wrote since `lsn`."""
    query = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)"
    return float((await (await monitor.execute(query, (lsn,))).fetchone())[0])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu")
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--via",
        choices=["client", "sql"],
        default="client",
        help="start the runs by the Python client, or by start_run() in SQL",
    )
    parser.add_argument("--codec", choices=["none", "fernet"], default="none")
    parser.add_argument("--count", action="store_true", help="count transactions per run")
    args = parser.parse_args()
    found = drain(args.database, args.runs, args.concurrency, args.via, args.codec, args.count)
    print(json.dumps(asyncio.run(found)))


if __name__ == "__main__":
    main()
