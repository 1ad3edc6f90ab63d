"""DBOS Transact 3.4 on the latency axes of `python -m bench latency|signal`, for ratios
measured in one run (`bench/dbos-side-by-side.sh`). Run by the peers' own Python, never the
project's: DBOS stays outside the project's dependencies.

    DBOS_URL=... python dbos_latency.py latency N GAP_MS  # start -> completed
    DBOS_URL=... python dbos_latency.py client N GAP_MS   # DBOSClient.enqueue -> completed
    DBOS_URL=... python dbos_latency.py signal N GAP_MS   # send -> recv's run completed

As the project's scenarios: a warm, idle worker (GAP_MS plus up to 1 s between samples), a
workflow of 3 no-op steps, and the run's completion seen by a second connection that polls
its status every 2 ms (`client_ms`); `latency` also gives `get_result_ms`, DBOS's own wait.
`client` enqueues from a DBOSClient in this process to a DBOS worker process it starts
(`worker` mode), as a service would. Prints one JSON object; `client_ms` is the figure.
"""

import json
import os
import random
import statistics
import subprocess
import sys
import time

import psycopg
from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions

URL = os.environ.get("DBOS_URL", "postgresql://postgres@127.0.0.1:5432/bench_dbos")
QUEUE = "bench_q"
WARM_UP = 20


@DBOS.step()
def noop(i: int) -> int:
    return i


@DBOS.workflow()
def bench_wf(k: int) -> int:
    for i in range(3):
        noop(i)
    return k


@DBOS.workflow()
def recv_wf(topic: str) -> object:
    return DBOS.recv(topic, timeout_seconds=120)


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    at = lambda q: round(s[min(len(s) - 1, int(q * len(s)))], 2)  # noqa: E731
    return {"median": round(statistics.median(s), 2), "p10": at(0.1), "p90": at(0.9),
            "min": round(s[0], 2), "max": round(s[-1], 2)}  # fmt: skip


def completed(conn: psycopg.Connection, wfid: str, want: str = "SUCCESS") -> float:
    """When the run's status is `want`, polled every 2 ms (as the project's reader)."""
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        row = conn.execute(
            "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s", (wfid,)
        ).fetchone()
        if row and row[0] == want:
            return time.perf_counter()
        if row and row[0] == "ERROR":
            raise RuntimeError(f"{wfid} failed")
        time.sleep(0.002)
    raise TimeoutError(wfid)


def launch(name: str) -> None:
    config: DBOSConfig = {"name": name, "system_database_url": URL, "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()


def gap(ms: int) -> None:
    time.sleep(ms / 1000 + random.random())


def latency(n: int, gap_ms: int, conn: psycopg.Connection) -> dict[str, object]:
    launch("latbench")
    for k in range(WARM_UP):
        DBOS.start_workflow(bench_wf, -1 - k).get_result()
    polled, waited = [], []
    for i in range(n):
        gap(gap_ms)
        t0 = time.perf_counter()
        handle = DBOS.start_workflow(bench_wf, i)
        polled.append((completed(conn, handle.get_workflow_id()) - t0) * 1000)
        gap(gap_ms)
        t0 = time.perf_counter()
        DBOS.start_workflow(bench_wf, n + i).get_result()
        waited.append((time.perf_counter() - t0) * 1000)
    return {"client_ms": stats(polled), "get_result_ms": stats(waited)}


def through_client(n: int, gap_ms: int, conn: psycopg.Connection) -> dict[str, object]:
    worker = subprocess.Popen([sys.executable, __file__, "worker"], stdout=subprocess.PIPE)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == b"ready"
        client = DBOSClient(system_database_url=URL)
        options: EnqueueOptions = {"queue_name": QUEUE, "workflow_name": bench_wf.__qualname__}
        for k in range(WARM_UP):
            client.enqueue(options, -1 - k).get_result()
        polled = []
        for i in range(n):
            gap(gap_ms)
            t0 = time.perf_counter()
            handle = client.enqueue(options, i)
            polled.append((completed(conn, handle.get_workflow_id()) - t0) * 1000)
        client.destroy()
        return {"client_ms": stats(polled)}
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def signal(n: int, gap_ms: int, conn: psycopg.Connection) -> dict[str, object]:
    launch("sigbench")
    polled = []
    for i in range(WARM_UP + n):
        topic = f"t{i}"
        handle = DBOS.start_workflow(recv_wf, topic)
        completed(conn, handle.get_workflow_id(), "PENDING")
        gap(gap_ms if i >= WARM_UP else 0)
        t0 = time.perf_counter()
        DBOS.send(handle.get_workflow_id(), {"ok": True}, topic)
        done = completed(conn, handle.get_workflow_id())
        if i >= WARM_UP:
            polled.append((done - t0) * 1000)
    return {"client_ms": stats(polled)}


def main() -> None:
    mode = sys.argv[1]
    if mode == "worker":  # `client`'s worker process: drains the queue until terminated
        launch("latbench")
        DBOS.register_queue(QUEUE, worker_concurrency=10, polling_interval_sec=0.1,
                            on_conflict="always_update")  # fmt: skip
        print("ready", flush=True)
        while True:
            time.sleep(3600)
    n, gap_ms = int(sys.argv[2]), int(sys.argv[3])
    conn = psycopg.connect(URL, autocommit=True)
    conn.execute("DROP SCHEMA IF EXISTS dbos CASCADE")  # made anew by the launch
    run = {"latency": latency, "client": through_client, "signal": signal}[mode]
    out = run(n, gap_ms, conn)
    from importlib.metadata import version

    print(json.dumps({"system": "dbos", "version": version("dbos"), "mode": mode, "n": n,
                      "gap_ms": gap_ms, **out}), flush=True)  # fmt: skip
    if mode != "client":
        DBOS.destroy()


if __name__ == "__main__":
    main()
