"""`uv run python -m bench MODE ...` — the scenarios of ../shared/bench, same JSON keys.

  throughput --concurrency C --runs N --database URL   -> {"runs_per_s", "steps_per_s"}
             [--via sql]                                the runs started by start_run() in
                                                        SQL, not by the Python client
  latency    --n N --gap-ms G --database URL            -> {"client_ms": {"median", ...}}
             [--trace]                                  and each hop's median (start commit,
                                                        NOTIFY, claim, steps, end, wake-up)
                                                        -> {"trace": {"hops_ms", ...}}
  signal     --n N --gap-ms G --database URL            -> {"client_ms": {"median", ...}}
  request    --n N --gap-ms G --database URL            app.request's round trip to a
                                                        waiting run -> {"client_ms": ...}
  scale      --concurrency C --runs N --database URL   throughput with 1M finished and
             [--finished 1000000 --sleeping 100000]     100k sleeping runs, against empty
  idle       --concurrency C --seconds S --database URL -> {"queries_per_s"}
  queued     --concurrency C --runs N --queue-concurrency Q [--pairs P] --database URL
             throughput with the workflow on a queue (concurrency Q), alternating with the
             unqueued figure -> {"runs_per_s" (queued), "ratio" (queued/unqueued, median)}
  perkey     --runs N --keys K --concurrency C [--pairs P] --database URL
             a queue's starts (sequential, 16 at once) and drain with each per-key
             strategy (on_full) beside "wait" -> {"median", "ratio_to_wait"}
  stream     --n N --gap-ms G --runs V --database URL  -> {"write_to_yield_ms", "values_per_s"}
             a waiting reader's latency (N values, G ms apart), then V values back to back
  attributes --finished F --n N --runs R --pairs P --database URL
             list_runs(attributes=...) p50/p99 over F runs with attributes (N calls each),
             and the cost of attributes on R sequential starts -> see bench/attributes.py
Each call starts from an empty schema of its own (`durably_bench`). The last line printed
is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging

from . import attributes, perkey, requests, scenarios


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "mode",
        choices=[
            "throughput",
            "latency",
            "signal",
            "scale",
            "idle",
            "queued",
            "stream",
            "request",
            "perkey",
            "attributes",
        ],
    )
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--gap-ms", type=int, default=1500)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--sleeping", type=int, default=100_000)
    parser.add_argument("--queue-concurrency", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--via", choices=["client", "sql"], default="client")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.mode == "request":
        work = requests.request_latency(args.database, args.n, args.gap_ms)
    elif args.mode == "perkey":
        work = perkey.perkey(args)
    elif args.mode == "attributes":
        work = attributes.attributes(args)
    else:
        work = scenarios.run(args)
    result = asyncio.run(work)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
