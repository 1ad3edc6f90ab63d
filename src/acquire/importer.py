"""The import step (`copy-file`): every chosen file of a download into the library.

Each file is hard-linked (`--link hardlink`, or `auto` when download and library share a
filesystem) or copied atomically (temp file, fsync, rename). Either way a file appears in
the library whole under its final name or not at all, and a file already there counts as
done, so the step re-run after a kill -9 finishes the import without duplicates. Before
anything is written the library's free space is checked against what the copies need.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from durably import NonRetryableError, StepContext

from . import faults, files, media, naming

HEARTBEAT_BYTES = 64 * 1024 * 1024


class NotEnoughSpace(NonRetryableError):
    """The library's filesystem has too little free space for the import."""


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def choose_mode(link: str, src: Path, library: Path) -> str:
    """ "hardlink" or "copy" for `--link auto|hardlink|copy`."""
    if link == "auto":
        return "hardlink" if files.same_filesystem(src, library) else "copy"
    if link == "hardlink" and not files.same_filesystem(src, library):
        raise NonRetryableError(f"--link hardlink: {src} and the library {library} are on "
                                "different filesystems; use --link auto or copy")  # fmt: skip
    return link


def check_space(pairs: list[tuple[Path, Path]], library: Path, mode: str) -> None:
    """Fail before writing anything if the copies would not fit (links need no space)."""
    if mode == "hardlink":
        return
    need = sum(src.stat().st_size for src, rel in pairs if not (library / rel).exists())
    free = files.free_bytes(library)
    if need > free:
        raise NotEnoughSpace(f"not enough free space in {files.existing_parent(library)}: "
                             f"the import needs {_gb(need)} ({need} bytes), "
                             f"{_gb(free)} ({free} bytes) are free")  # fmt: skip


def _checkpoint(ctx: StepContext) -> Callable[[int, int], None]:
    last = [0]
    pause = faults.copy_delay()

    def checkpoint(done: int, total: int) -> None:
        ctx.raise_if_cancelled()
        if pause:
            time.sleep(pause)
        faults.maybe_kill("kill-mid-copy")  # drills: a kill -9 with a temp file half-written
        if done - last[0] >= HEARTBEAT_BYTES:  # a long copy keeps its lease alive
            last[0] = done
            ctx.heartbeat()

    return checkpoint


def manifest_digest(entries: list[dict[str, Any]]) -> str:
    """A digest of what was imported: each library path with its size."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: str(e["path"])):
        h.update(f"{e['path']}\t{e['size']}\n".encode())
    return h.hexdigest()


def import_download(ctx: StepContext, order: Any, content_path: str) -> dict[str, Any]:
    """The `copy-file` step body: plan, check space, place every file; what was placed."""
    root, library = Path(content_path), Path(order.library)
    if not root.exists():
        raise NonRetryableError(f"the download is gone: {root}")
    videos = media.select(root)
    if not videos:
        raise NonRetryableError(f"no video file in the download {root}")
    given = {"title": order.title, "year": order.year}
    try:
        pairs = naming.plan(root, videos, order.template, given)
    except (naming.MissingField, naming.BadTemplate) as exc:
        raise NonRetryableError(str(exc)) from None
    mode = choose_mode(order.link, root, library)
    check_space(pairs, library, mode)
    tag = f"{ctx.run_id[:8]}-{ctx.fence.fence}"
    placed: list[dict[str, Any]] = []
    for src, rel in pairs:
        dest = library / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        files.remove_stale_partials(dest, tag)
        try:
            if mode == "hardlink":
                new = files.hard_link(src, dest)
            else:
                new = files.atomic_copy(src, dest, tag, _checkpoint(ctx))
        except FileExistsError as exc:
            raise NonRetryableError(str(exc)) from None
        placed.append({"path": str(dest), "size": dest.stat().st_size, "new": new})
        ctx.raise_if_cancelled()
        faults.maybe_kill("kill-mid-import")  # drills: some files placed, the rest not yet
    faults.maybe_kill("kill-after-rename")  # drills: all placed, but the step is not recorded
    single = len(placed) == 1
    return {
        "path": placed[0]["path"] if single else str(library / pairs[0][1].parts[0]),
        "size": sum(p["size"] for p in placed), "files": placed, "mode": mode,
        "sha256": files.digest(Path(placed[0]["path"])) if single and mode == "copy"
        else manifest_digest(placed),
        "copied": any(p["new"] for p in placed),
    }  # fmt: skip
