"""Copying a download into the library so that a crash never leaves half a file there.

The copy goes to a temporary file in the destination directory, is fsynced, then renamed
over the final name (atomic on one filesystem) and the directory is fsynced. A file that
is already there with the same content counts as done, so a copy re-run after a crash
(rename done, step not yet recorded) is a no-op.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

CHUNK = 1024 * 1024


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def same_file(a: Path, b: Path) -> bool:
    return a.stat().st_size == b.stat().st_size and digest(a) == digest(b)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_copy(
    src: Path, dest: Path, tag: str, checkpoint: Callable[[int, int], None] | None = None
) -> bool:
    """Copy `src` to `dest` atomically; False if an identical `dest` was already there.

    Args:
        tag: makes the temporary name unique to this attempt (e.g. run id and fence).
        checkpoint: called after every chunk with (bytes done, total); it may raise to stop
            the copy (cancellation), which removes the temporary file.

    Raises:
        FileExistsError: `dest` exists with different content.
    """
    if dest.exists():
        if same_file(src, dest):
            return False
        raise FileExistsError(f"{dest} already exists with different content")
    tmp = dest.with_name(f".{dest.name}.{tag}.partial")
    total, done = src.stat().st_size, 0
    try:
        with src.open("rb") as fin, tmp.open("wb") as fout:
            while chunk := fin.read(CHUNK):
                fout.write(chunk)
                done += len(chunk)
                if checkpoint is not None:
                    checkpoint(done, total)
            fout.flush()
            os.fsync(fout.fileno())
        os.replace(tmp, dest)
        _fsync_dir(dest.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return True
