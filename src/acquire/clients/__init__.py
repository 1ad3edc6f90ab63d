"""Download clients behind one small interface: qBittorrent (Web API) and local files."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Submitted:
    """A download the client holds: its hash and a display name."""

    info_hash: str
    name: str
    already: bool = False  # the client had it before this submit (e.g. a lost reply)


@dataclass(frozen=True)
class Status:
    """How far a download is."""

    exists: bool
    done: bool
    progress: float
    state: str
    content_path: str | None
    done_bytes: int = 0  # grows while the download makes progress (stall detection)
    speed: int = 0  # bytes a second, downloading
    eta: int | None = None  # seconds left, if the client knows
    ratio: float = 0.0  # uploaded / downloaded
    seeding_time: float | None = None  # seconds seeded so far, if the client counts it

    def as_dict(self) -> dict[str, object]:
        """The status as JSON-able data (a step's output)."""
        return dataclasses.asdict(self)


class DownloadClient(Protocol):
    """What the workflow needs from a download client. Every call is safe to repeat."""

    def submit(self, order_id: str, source: str) -> Submitted:
        """Start downloading `source`, or find the download already started for it."""

    def status(self, info_hash: str, source: str | None = None) -> Status:
        """The download's progress; `exists` is False if the client does not know it.

        `source` is the order's source, for a client that reads the data in place."""

    def remove(self, info_hash: str) -> None:
        """Remove the download and its data; an unknown one counts as removed."""


def client_for(name: str) -> DownloadClient:
    """The client `name`, configured from the environment (see README)."""
    if name == "local":
        from .local import LocalClient

        return LocalClient()
    if name == "qbittorrent":
        from .qbittorrent import QbittorrentClient

        return QbittorrentClient(
            url=os.environ.get("QBITTORRENT_URL", "http://127.0.0.1:8080"),
            username=os.environ.get("QBITTORRENT_USERNAME", "admin"),
            password=os.environ.get("QBITTORRENT_PASSWORD", "adminadmin"),
            save_path=os.environ.get("QBITTORRENT_SAVE_PATH") or None,
        )
    raise ValueError(f"unknown download client {name!r} (use 'qbittorrent' or 'local')")
