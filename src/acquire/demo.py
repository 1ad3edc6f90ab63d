"""`acquire demo`: the whole pipeline, live, on the embedded SQLite default."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from pathlib import Path

from rich.live import Live

from . import files, library, view
from .workflow import Order, acquire, app


def _make_source(path: Path, size_mb: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1024 * 1024))


async def run_demo(size_mb: int, workdir: Path | None) -> None:
    console = view.console
    work = workdir or Path(tempfile.mkdtemp(prefix="acquire-demo-"))
    source = work / "downloads" / "big-buck-bunny.mkv"
    _make_source(source, size_mb)
    order = Order(id=f"demo-{uuid.uuid4().hex[:8]}", source=str(source),
                  library=str(work / "library"), client="local", retention="2s")  # fmt: skip
    library.ensure_tables(app.url)
    console.print(f"[bold]acquire demo[/] on {app.url}\n  source  {source} ({size_mb} MB)\n"
                  f"  library {order.library}\n")  # fmt: skip
    async with app, app.worker(concurrency=2, lease="10s", heartbeat="2s"):
        handle = await acquire.start(order)
        notified = False
        with Live(console=console, refresh_per_second=10, transient=False) as live:
            while True:
                run = await handle.get()
                steps = await app.list_steps(run.run_id)
                live.update(view.steps_table(run, steps))
                if not notified and (run.waiting_for or "").startswith("signal:"):
                    # What qBittorrent's finish hook does: `acquire notify HASH`.
                    await app.send_signal(f"download-done:{order.id}", {"source": "demo hook"})
                    notified = True
                if run.terminal:
                    break
                await asyncio.sleep(0.1)
    dest = Path(order.library) / source.name
    same = dest.exists() and files.same_file(source, dest)
    rows = [e for e in library.entries(app.url) if e["order_id"] == order.id]
    console.print(f"\nrun {run.status}; library file {dest} "
                  f"{'is identical to the source' if same else 'IS MISSING OR DIFFERENT'}; "
                  f"{len(rows)} library row")  # fmt: skip
    console.print(f"see it again with: durably --database {app.url} show {run.run_id}")
    if run.status != "completed" or not same or len(rows) != 1:
        raise SystemExit(1)
