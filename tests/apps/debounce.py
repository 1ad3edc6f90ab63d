"""Debounce (SPEC §4.23) from several processes: a workflow that returns the input it ran
with, and a starter (`python -m tests.apps.debounce WRITER COUNT ...`) that starts it COUNT
times with one debounce key, from a given instant on (so that several starters overlap),
and writes one JSON line per start: `{"writer", "n", "run_id", "joined"}`.
Configured by DURABLY_DATABASE_URL."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from durably import Durably

URL = os.environ.get("DURABLY_DATABASE_URL", "sqlite:///durably.db")
app = Durably(URL)


@app.workflow(name="digest", version="v1")
async def digest(ctx: Any, item: dict[str, Any]) -> dict[str, Any]:
    return item


async def _starts(args: argparse.Namespace) -> None:
    with open(args.out, "a") as out:
        async with app:
            await app.open()  # connected before the agreed instant: the starts overlap
            await asyncio.sleep(max(0.0, args.at - time.time()))
            for n in range(args.count):
                handle = await digest.start(
                    {"key": args.key, "writer": args.writer, "n": n}, debounce=args.debounce,
                    debounce_key=args.key, debounce_max=args.max,
                )  # fmt: skip
                line = {"writer": args.writer, "n": n, "run_id": handle.run_id,
                        "joined": handle.joined}  # fmt: skip
                out.write(json.dumps(line) + "\n")
                out.flush()
                if args.gap:
                    await asyncio.sleep(args.gap)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("writer")
    parser.add_argument("count", type=int)
    parser.add_argument("--key", required=True)
    parser.add_argument("--debounce", required=True)
    parser.add_argument("--max", default=None)
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between starts")
    parser.add_argument("--at", type=float, default=0.0, help="Unix time of the first start")
    parser.add_argument("--out", required=True)
    asyncio.run(_starts(parser.parse_args()))


if __name__ == "__main__":
    main()
