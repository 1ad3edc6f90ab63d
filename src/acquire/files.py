"""Copying a download into the library so that a crash never leaves half a file there.

The copy goes to a temporary file in the destination directory, is fsynced, then renamed
over the final name (atomic on one filesystem) and the directory is fsynced. A file that
is already there with the same content counts as done, so a copy re-run after a crash
(rename done, step not yet recorded) is a no-op.
"""

from __future__ import annotations

import glob
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


def hard_link(src: Path, dest: Path) -> bool:
    """Link `src` at `dest`; False if `dest` already is that file (or an identical one).

    A link is made under its final name in one system call, so a crash leaves either no
    entry or the whole file; the directory is fsynced so the entry survives a power cut.

    Raises:
        FileExistsError: `dest` exists with different content.
    """
    if dest.exists():
        if os.path.samefile(src, dest) or same_file(src, dest):
            return False
        raise FileExistsError(f"{dest} already exists with different content")
    os.link(src, dest)
    _fsync_dir(dest.parent)
    return True


def existing_parent(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists."""
    while not path.exists():
        path = path.parent
    return path


def same_filesystem(a: Path, b: Path) -> bool:
    """Whether a hard link from `a` can be made in `b` (or where `b` would be created)."""
    return existing_parent(a).stat().st_dev == existing_parent(b).stat().st_dev


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    st = os.statvfs(existing_parent(path))
    return st.f_bavail * st.f_frsize


def remove_stale_partials(dest: Path, keep: str) -> None:
    """Remove temporary files an earlier, killed attempt left for `dest` (not `keep`'s)."""
    if not dest.parent.is_dir():
        return
    for stale in dest.parent.glob(f".{glob.escape(dest.name)}.*.partial"):
        if f".{keep}.partial" not in stale.name:
            stale.unlink(missing_ok=True)
