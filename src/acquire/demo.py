"""`acquire demo`: a multi-file download imported with hard links, live, on SQLite."""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
import uuid
from pathlib import Path

from rich.live import Live

from . import library, view
from .workflow import Order, acquire, app

RELEASE = "Big.Buck.Bunny.2008.1080p.BluRay.x264-DEMO"
MODES = {"hardlink": "hard links (no second copy)", "copy": "atomic copies"}
TEMPLATE = "{title} ({year})/{title} ({year}){ext}"


def make_release(downloads: Path, size_mb: int) -> Path:
    """A finished folder download: the film, its subtitles, and a sample to skip."""
    root = downloads / RELEASE
    (root / "Subs").mkdir(parents=True, exist_ok=True)
    (root / "Sample").mkdir(exist_ok=True)
    with (root / f"{RELEASE}.mkv").open("wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1024 * 1024))
    (root / f"{RELEASE}.en.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nHello\n")
    (root / "Subs" / "French.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nBonjour\n")
    (root / "Sample" / "sample.mkv").write_bytes(os.urandom(64 * 1024))
    (root / "RARBG.txt").write_text("not a video\n")
    return root


def _tree(root: Path) -> list[str]:
    lines = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            lines.append(f"  {p.relative_to(root)}  ({st.st_size} bytes, {st.st_nlink} links)")
    return lines


def again(url: str, run_id: str) -> str:
    """The command that shows the run from anywhere in the repository: `uv run` when uv ran
    the demo (it sets UV), the database as an absolute path (a server's URL by its variable,
    so its password is not printed)."""
    if url.startswith("sqlite:///"):
        path, sep, query = url.removeprefix("sqlite:///").partition("?")
        database = shlex.quote(f"sqlite:///{Path(path).resolve()}{sep}{query}")
    else:
        database = '"$DURABLY_DATABASE_URL"'
    uv = "uv run " if os.environ.get("UV") else ""
    return f"{uv}durably --database {database} show {run_id}"


async def run_demo(size_mb: int, workdir: Path | None) -> None:
    console = view.console
    work = workdir or Path(tempfile.mkdtemp(prefix="acquire-demo-"))
    source = make_release(work / "downloads", size_mb)
    order = Order(id=f"demo-{uuid.uuid4().hex[:8]}", source=str(source),
                  library=str(work / "library"), client="local", retention="2s",
                  link="auto", template=TEMPLATE)  # fmt: skip
    library.ensure_tables(app.url)
    console.print(f"[bold]acquire demo[/] on {app.url}\n  source   {source}\n"
                  f"           ({size_mb} MB film, two subtitles, a sample to skip)\n"
                  f"  library  {order.library}\n  template {TEMPLATE}\n")  # fmt: skip
    async with app, app.worker(concurrency=2, lease="10s", heartbeat="2s"):
        handle = await acquire.start(order)
        notified = False
        with Live(console=console, refresh_per_second=10, transient=False) as live:
            while True:
                run = await handle.get()
                steps = await app.list_steps(run.run_id)
                live.update(view.steps_table(run, steps))
                if not notified and steps:
                    # What qBittorrent's finish hook does: `acquire notify HASH`.
                    await app.send_signal(f"download-done:{order.id}", {"source": "demo hook"})
                    notified = True
                if run.terminal:
                    break
                await asyncio.sleep(0.1)
    out = run.output or {}
    rows = [e for e in library.entries(app.url) if e["order_id"] == order.id]
    console.print(
        f"\nrun {run.status}: {len(out.get('files', []))} files imported as "
        f"{MODES.get(str(out.get('mode')), '?')}, {len(rows)} library row; the library now holds:"
    )
    for line in _tree(Path(order.library)):
        console.print(line)
    console.print(f"see it again with: {again(app.url, run.run_id)}", markup=False,
                  highlight=False, soft_wrap=True)  # fmt: skip
    film = Path(order.library) / "Big Buck Bunny (2008)" / "Big Buck Bunny (2008).mkv"
    if run.status != "completed" or not film.exists() or len(rows) != 1:
        raise SystemExit(1)
