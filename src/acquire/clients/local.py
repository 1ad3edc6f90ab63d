"""The `local` client: the "download" is a file already on disk (demos, imports)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import Status, Submitted


class LocalClient:
    """Treats a local path as a finished download; never deletes the user's file."""

    def submit(self, order_id: str, source: str) -> Submitted:
        path = Path(source).resolve()
        if not path.exists():
            raise FileNotFoundError(f"no such file: {source}")
        digest = hashlib.sha1(str(path).encode()).hexdigest()
        return Submitted(info_hash=f"local-{digest}", name=path.name)

    def status(self, info_hash: str) -> Status:
        return Status(exists=True, done=True, progress=1.0, state="local", content_path=None)

    def remove(self, info_hash: str) -> None:
        return None
