"""`uv run python -m bench.debounce --database URL [--starts N] [--rounds R] [--clients C]`:
what a debounced start costs against a plain one (SPEC §4.23), in starts per second.

Each round times N starts of each kind, in turn, from C concurrent callers of one app (no
worker runs: starts alone). The kinds:
  plain        `start(k)`
  new_window   `start(k, debounce="1h", debounce_key=<a new key each time>)`: each opens
               a window (the insert path)
  one_window   the same key every time: each start joins one window (the update path,
               every caller on one row)
  windows_100  100 keys in turn: joins spread over 100 windows
Prints per kind the median starts/s over the rounds and its ratio to plain's in the same
round (median); the last line printed is one JSON object. Starts from an empty schema.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from durably import Durably

from .scenarios import make_app, reset

KINDS: dict[str, Callable[[int, int], dict[str, Any]]] = {
    "plain": lambda r, k: {},
    "new_window": lambda r, k: {"debounce": "1h", "debounce_key": f"new-{r}-{k}"},
    "one_window": lambda r, k: {"debounce": "1h", "debounce_key": "one"},
    "windows_100": lambda r, k: {"debounce": "1h", "debounce_key": f"w{k % 100}"},
}


async def _round(app: Durably, kind: str, r: int, starts: int, clients: int) -> float:
    """Starts per second of `starts` starts of `kind`, from `clients` concurrent callers."""
    options = KINDS[kind]
    todo = iter(range(starts))

    async def caller() -> None:
        for k in todo:
            await app.start("bench", k, **options(r, k))

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(clients)))
    return starts / (time.perf_counter() - t0)


async def measure(url: str, starts: int, rounds: int, clients: int) -> dict[str, Any]:
    await reset(url)
    app = make_app(url)
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    async with app:
        for kind in KINDS:  # warm-up: connections, prepared statements
            await _round(app, kind, -1, min(starts, 200), clients)
        for r in range(rounds):
            for kind in KINDS:
                rates[kind].append(await _round(app, kind, r, starts, clients))
    out: dict[str, Any] = {
        "system": "durably", "mode": "debounce", "database": url.split(":", 1)[0],
        "starts": starts, "rounds": rounds, "clients": clients,
    }  # fmt: skip
    for kind, xs in rates.items():
        ratios = [x / p for x, p in zip(xs, rates["plain"], strict=True)]
        out[kind] = {"starts_per_s": round(statistics.median(xs), 1),
                     "ratio_to_plain": round(statistics.median(ratios), 3)}  # fmt: skip
    await reset(url)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.debounce")
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--starts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    result = asyncio.run(measure(args.database, args.starts, args.rounds, args.clients))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
