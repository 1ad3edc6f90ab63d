"""The `local` client: the "download" is a file or a folder already on disk (demos, imports).

A folder is still downloading while any file in it carries qBittorrent's incomplete-file
extension (`.!qB`) or `.part`; its progress is the share of bytes in finished files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import Status, Submitted

INCOMPLETE = (".!qB", ".part")


class LocalClient:
    """Treats a local path as a download; never deletes the user's files."""

    def submit(self, order_id: str, source: str) -> Submitted:
        path = Path(source).resolve()
        if not path.exists():
            raise FileNotFoundError(f"no such file or folder: {source}")
        digest = hashlib.sha1(str(path).encode()).hexdigest()
        return Submitted(info_hash=f"local-{digest}", name=path.name)

    def status(self, info_hash: str, source: str | None = None) -> Status:
        path = Path(source) if source else None
        if path is None or not path.exists():
            return Status(exists=path is None, done=path is None, progress=1.0 if path is None
                          else 0.0, state="local", content_path=None)  # fmt: skip
        sizes = {p: p.stat().st_size for p in (path.rglob("*") if path.is_dir() else [path])
                 if p.is_file()}  # fmt: skip
        total = sum(sizes.values())
        partial = sum(n for p, n in sizes.items() if p.name.endswith(INCOMPLETE))
        done = not any(p.name.endswith(INCOMPLETE) for p in sizes)
        progress = 1.0 if done else (total - partial) / total if total else 0.0
        return Status(exists=True, done=done, progress=progress,
                      state="local" if done else "downloading", content_path=str(path),
                      done_bytes=total, ratio=0.0)  # fmt: skip

    def remove(self, info_hash: str) -> None:
        return None
