"""DBOS Transact 3.4's streams on the scenario of `python -m bench stream`, for a ratio
measured in one run (`bench/stream-side-by-side.sh`). Run by the peers' own Python, never
the project's: DBOS stays outside the project's dependencies.

    DBOS_URL=postgresql://... python dbos_stream.py N GAP_MS VALUES

- latency: one workflow writes N values with `DBOS.write_stream`, a step sleeping GAP_MS
  between each two, so that the reader waits for every one; a sample is the time from the
  write call to the reader's yield (one process, one clock). The reader is
  `DBOS.read_stream` in a thread, with DBOS's defaults.
- throughput: one workflow writes VALUES values back to back; values/s from the first
  write to the reader's last yield.
Prints one JSON object with the keys of `python -m bench stream`.
"""

import json
import os
import statistics
import sys
import threading
import time

import psycopg
from dbos import DBOS, DBOSConfig

URL = os.environ.get("DBOS_URL", "postgresql://postgres@127.0.0.1:5432/bench_dbos")
WARM_UP = 20
called: dict[int, float] = {}
written: dict[int, float] = {}


@DBOS.step()
def pause(ms: int) -> None:
    time.sleep(ms / 1000)


@DBOS.workflow()
def streambench(n: int, gap_ms: int) -> int:
    for i in range(n):
        if gap_ms:
            pause(gap_ms)
        called[i] = time.perf_counter()
        DBOS.write_stream("s", i)
        written[i] = time.perf_counter()
    DBOS.close_stream("s")
    return n


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    at = lambda q: round(s[min(len(s) - 1, int(q * len(s)))], 2)  # noqa: E731
    return {"median": round(statistics.median(s), 2), "p10": at(0.1), "p90": at(0.9),
            "p99": at(0.99), "min": round(s[0], 2), "max": round(s[-1], 2)}  # fmt: skip


def follow(n: int, gap_ms: int) -> tuple[dict[int, float], float]:
    called.clear()
    written.clear()
    read: dict[int, float] = {}
    handle = DBOS.start_workflow(streambench, n, gap_ms)

    def reader() -> None:
        for i in DBOS.read_stream(handle.get_workflow_id(), "s"):
            read[i] = time.perf_counter()

    thread = threading.Thread(target=reader)
    thread.start()
    handle.get_result()
    thread.join(timeout=600)
    return read, read[n - 1] - called[0]


def main() -> None:
    n, gap_ms, values = (int(a) for a in sys.argv[1:4])
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS dbos CASCADE")
    config: DBOSConfig = {"name": "streambench", "system_database_url": URL, "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()
    total = WARM_UP + n
    read, _ = follow(total, gap_ms)
    samples = range(WARM_UP, total)
    to_yield = [(read[i] - called[i]) * 1000 for i in samples]
    commit = [(written[i] - called[i]) * 1000 for i in samples]
    after = [(read[i] - written[i]) * 1000 for i in samples]
    _, span = follow(values, 0)
    from importlib.metadata import version

    print(json.dumps({
        "system": "dbos", "version": version("dbos"), "mode": "stream", "n": n,
        "gap_ms": gap_ms, "write_to_yield_ms": stats(to_yield),
        "write_commit_ms": stats(commit), "commit_to_yield_ms": stats(after),
        "values": values, "values_per_s": round(values / span, 1),
    }), flush=True)  # fmt: skip
    DBOS.destroy()


if __name__ == "__main__":
    main()
