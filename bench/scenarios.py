"""The benchmark scenarios, each on a fresh schema."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
from typing import Any

import psycopg

from durably import Codec, Durably

from . import tracing

SCHEMA = "durably_bench"


def make_app(url: str, queue_concurrency: int | None = None, codec: Codec | None = None) -> Durably:
    app = Durably(url, schema=SCHEMA, codec=codec)
    queue = app.queue("bench", concurrency=queue_concurrency) if queue_concurrency else None

    async def noop(i: int) -> int:
        return i

    @app.workflow(name="bench", version="v1", queue=queue)
    async def bench(ctx: Any, k: int) -> int:
        for i in range(3):
            await ctx.step.run(f"s{i}", noop, i)
        return k

    @app.workflow(name="sigbench", version="v1")
    async def sigbench(ctx: Any, sig: str) -> Any:
        return await ctx.step.wait_for_signal(sig, timeout="10m")

    return app


async def reset(url: str, schema: str = SCHEMA) -> None:
    """An empty start: the SQLite file and its journals removed, or the schema dropped."""
    if url.startswith("sqlite"):
        import pathlib

        path = pathlib.Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            pathlib.Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"median": round(statistics.median(s), 2), "p10": round(s[int(0.1 * len(s))], 2),
            "p90": round(s[min(len(s) - 1, int(0.9 * len(s)))], 2),
            "min": round(s[0], 2), "max": round(s[-1], 2)}  # fmt: skip


async def throughput(url: str, concurrency: int, runs: int, prefill: tuple[int, int] = (0, 0),
                     queue_concurrency: int | None = None, via: str = "client",
                     ) -> dict[str, Any]:  # fmt: skip
    await reset(url)
    app = make_app(url, queue_concurrency)
    async with app:
        if any(prefill):
            await _prefill(app, url, *prefill)
        t0 = time.perf_counter()
        await (_start_by_sql(url, runs) if via == "sql" else _start(app, runs))
        enqueue_s = time.perf_counter() - t0
        async with app.worker(concurrency=concurrency), _Reader(app) as reader:
            while await reader.completed() < runs:
                await asyncio.sleep(0.05)
        span = await _span(app, url)
    return {
        "system": "durably",
        "mode": "throughput" if queue_concurrency is None else "queued",
        "via": via,
        "queue_concurrency": queue_concurrency,
        "n": runs,
        "concurrency": concurrency,
        "enqueue_seq_runs_per_s": round(runs / enqueue_s, 1),
        "drain_span_s_db": span,
        "runs_per_s": round(runs / span, 1),
        "steps_per_s": round(3 * runs / span, 1),
    }


async def _start(app: Durably, runs: int) -> None:
    for k in range(runs):
        await app.start("bench", k)


async def _start_by_sql(url: str, runs: int) -> None:
    """The runs started as a client in another language would: `start_run` (SPEC §4.25),
    one statement after the other on one connection of its own."""
    if url.startswith("sqlite"):
        raise SystemExit("--via sql needs PostgreSQL: SQLite has no functions")
    query = f"SELECT {SCHEMA}.start_run('bench', 'v1', CAST(%s AS jsonb))"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for k in range(runs):
            await conn.execute(query, (str(k),), prepare=True)


class _Reader:
    """Reads from the database beside the app as the peers' scripts do: plain statements on
    one connection held throughout (a connection per read, or a pooled read through the
    app, would cost the worker beside it more than the read does)."""

    def __init__(self, app: Durably) -> None:
        self.table = f"{SCHEMA}.runs" if app.url.startswith("postgres") else f"{SCHEMA}_runs"
        self._url = app.url
        self._conn: Any = None

    async def __aenter__(self) -> _Reader:
        if self._url.startswith("sqlite"):
            import sqlite3

            self._conn = sqlite3.connect(self._url.removeprefix("sqlite:///"))
        else:
            self._conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if isinstance(self._conn, psycopg.AsyncConnection):
            await self._conn.close()
        else:
            self._conn.close()

    async def one(self, query: str, *params: Any) -> Any:
        """The first column of the first row (None if there is none)."""
        if isinstance(self._conn, psycopg.AsyncConnection):
            row = await (await self._conn.execute(query, params)).fetchone()
        else:
            row = self._conn.execute(query.replace("%s", "?"), params).fetchone()
        return row[0] if row else None

    async def completed(self) -> int:
        """How many bench runs have completed."""
        return int(await self.one(
            f"SELECT count(*) FROM {self.table} WHERE workflow = 'bench' AND status = 'completed'"
        ))  # fmt: skip

    async def status_of(self, run_id: str) -> str | None:
        status = await self.one(f"SELECT status FROM {self.table} WHERE id = %s", run_id)
        return None if status is None else str(status)


async def _span(app: Durably, url: str) -> float:
    runs = await app.list_runs(status="completed", workflow="bench", limit=10**7)
    first = min(r.started_at for r in runs if r.started_at)
    last = max(r.finished_at for r in runs if r.finished_at)
    return round((last - first).total_seconds(), 3)


async def _prefill(app: Durably, url: str, finished: int, sleeping: int) -> None:
    """Finished and sleeping runs of another workflow, written straight into the tables."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"""
            INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input, output,
                attempts, available_at, created_at, started_at, finished_at)
            SELECT 'done-' || g, 'default', 'old', 'v1', 'completed', '1', '1', 1, NULL,
                   now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
            FROM generate_series(1, {finished}) g""")
        await conn.execute(f"""
            INSERT INTO {SCHEMA}.runs (id, namespace, workflow, version, status, input,
                attempts, available_at, wake_at, waiting_for, created_at)
            SELECT 'sleep-' || g, 'default', 'bench', 'v1', 'waiting', '1', 1,
                   now() + interval '7 days', now() + interval '7 days', 'sleep:retention', now()
            FROM generate_series(1, {sleeping}) g""")
        await conn.execute(f"VACUUM ANALYZE {SCHEMA}.runs")


async def latency(url: str, n: int, gap_ms: int, mode: str, trace: bool = False,
                  ) -> dict[str, Any]:  # fmt: skip
    if trace and (mode != "latency" or not url.startswith("postgres")):
        raise SystemExit("--trace is for latency on PostgreSQL")
    await reset(url)
    with tracing.Tracer().installed() if trace else contextlib.nullcontext() as tracer:
        return await _latency(url, n, gap_ms, mode, tracer)


async def _latency(url: str, n: int, gap_ms: int, mode: str, tracer: tracing.Tracer | None,
                   ) -> dict[str, Any]:  # fmt: skip
    app = make_app(url)
    client: list[float] = []
    samples: list[dict[str, Any]] = []
    async with app, app.worker(concurrency=10), _Reader(app) as reader:
        await _warm_up(app, mode)
        for i in range(n):
            if mode == "latency":
                await asyncio.sleep(gap_ms / 1000 + random.random())
                if tracer is not None:
                    tracer.reset()
                t0 = time.perf_counter()
                handle = await app.start("bench", i)
                started = time.perf_counter()
            else:
                sig = f"sig-{i}-{random.random()}"
                handle = await app.start("sigbench", sig)
                while (await handle.status()) != "waiting":
                    await asyncio.sleep(0.005)
                await asyncio.sleep(gap_ms / 1000 + random.random())
                t0 = time.perf_counter()
                sent = await app.send_signal(sig, {"ok": True})
                assert sent["delivered_to"] == [handle.run_id], sent
            while (await reader.status_of(handle.run_id)) != "completed":
                await asyncio.sleep(0.002)
            seen = time.perf_counter()
            client.append((seen - t0) * 1000)
            if tracer is not None:
                samples.append(tracing.breakdown(tracer, t0, started, seen))
    result: dict[str, Any] = {"system": "durably", "mode": mode, "n": n, "gap_ms": gap_ms,
                              "client_ms": stats(client)}  # fmt: skip
    if tracer is not None:
        result["trace"] = tracing.summary(samples)
        print(tracing.table(result["trace"]), file=sys.stderr, flush=True)
    return result


async def _warm_up(app: Durably, mode: str) -> None:
    """A warm worker, as in production: its pool's connections open and its statements
    prepared and planned there (PostgreSQL plans a prepared statement generically after
    five uses), not only one run through. The samples go one at a time, so a few of the
    pool's connections serve them all."""
    for k in range(WARM_UP):
        if mode == "latency":
            await (await app.start("bench", -1 - k)).result(timeout=30)
        else:
            sig = f"warm-{k}-{random.random()}"
            handle = await app.start("sigbench", sig)
            while (await handle.status()) != "waiting":
                await asyncio.sleep(0.005)
            await app.send_signal(sig, {"ok": True})
            await handle.result(timeout=30)


WARM_UP = 20


async def idle(url: str, concurrency: int, seconds: float) -> dict[str, Any]:
    await reset(url)
    app = make_app(url)
    async with app, app.worker(concurrency=concurrency):
        await (await app.start("bench", -1)).result(timeout=30)
        await asyncio.sleep(2)  # settle
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            q = (
                "SELECT xact_commit + xact_rollback FROM pg_stat_database"
                " WHERE datname = current_database()"
            )
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            before = (await (await conn.execute(q)).fetchone())[0]  # type: ignore[index]
            await asyncio.sleep(seconds)
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            after = (await (await conn.execute(q)).fetchone())[0]  # type: ignore[index]
    # This measuring connection's own statements (two clears, two reads) are not the worker's.
    transactions = after - before - 3
    return {
        "system": "durably",
        "mode": "idle",
        "concurrency": concurrency,
        "seconds": seconds,
        "queries_per_s": round(transactions / seconds, 2),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.mode == "throughput":
        return await throughput(args.database, args.concurrency, args.runs, via=args.via)
    if args.mode == "queued":
        return await queued(args)
    if args.mode in ("latency", "signal"):
        return await latency(args.database, args.n, args.gap_ms, args.mode, args.trace)
    if args.mode == "idle":
        return await idle(args.database, args.concurrency, args.seconds)
    if args.mode == "stream":
        from .streams import stream  # it imports this module

        return await stream(args.database, args.n, args.gap_ms, args.runs)
    empty = await throughput(args.database, args.concurrency, args.runs)
    full = await throughput(args.database, args.concurrency, args.runs,
                            (args.finished, args.sleeping))  # fmt: skip
    return {
        "system": "durably",
        "mode": "scale",
        "empty_runs_per_s": empty["runs_per_s"],
        "full_runs_per_s": full["runs_per_s"],
        "finished": args.finished,
        "sleeping": args.sleeping,
        "ratio": round(full["runs_per_s"] / empty["runs_per_s"], 3),
    }


async def queued(args: argparse.Namespace) -> dict[str, Any]:
    """Throughput of runs of a queue (concurrency `--queue-concurrency`) beside the same
    runs unqueued, alternating `--pairs` times so that both see the same machine."""
    plain: list[float] = []
    queue: list[float] = []
    for _ in range(args.pairs):
        plain.append((await throughput(args.database, args.concurrency, args.runs))["runs_per_s"])
        queue.append(
            (
                await throughput(
                    args.database,
                    args.concurrency,
                    args.runs,
                    queue_concurrency=args.queue_concurrency,
                )
            )["runs_per_s"]
        )
    return {
        "system": "durably",
        "mode": "queued",
        "concurrency": args.concurrency,
        "queue_concurrency": args.queue_concurrency,
        "n": args.runs,
        "unqueued_runs_per_s": plain,
        "queued_runs_per_s": queue,
        "runs_per_s": statistics.median(queue),
        "ratio": round(statistics.median(q / p for q, p in zip(queue, plain, strict=True)), 3),
    }
