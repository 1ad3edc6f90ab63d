"""qBittorrent through its Web API (qbittorrent-api).

Written for 4.5.x and later: `torrents_add` does not return the hash (and says "Fails."
for a duplicate), so the hash is computed from the torrent before adding, and the add is
tagged `acquire:<order id>` so `acquire notify HASH` can find the order again.
"""

from __future__ import annotations

import time
from typing import Any

import qbittorrentapi

from .. import faults
from ..torrents import resolve
from . import Status, Submitted

ETA_UNKNOWN = 8640000  # qBittorrent's "infinity" (100 days)
DONE_STATES = {"uploading", "stalledUP", "pausedUP", "stoppedUP", "queuedUP", "forcedUP"}


class QbittorrentClient:
    """A download client backed by a qBittorrent daemon."""

    def __init__(self, url: str, username: str, password: str, save_path: str | None) -> None:
        self.url = url
        self.save_path = save_path
        # A URL with a scheme is taken as written: without FORCE_SCHEME_FROM_HOST the client
        # probes HTTPS whenever an HTTP probe fails (a daemon still starting, say).
        self._api = qbittorrentapi.Client(
            host=url, username=username, password=password,
            REQUESTS_ARGS={"timeout": (5, 30)}, VERIFY_WEBUI_CERTIFICATE=False,
            FORCE_SCHEME_FROM_HOST="://" in url,
        )  # fmt: skip

    def _info(self, info_hash: str) -> qbittorrentapi.TorrentDictionary | None:
        found = self._api.torrents_info(torrent_hashes=info_hash)
        return found[0] if found else None

    def submit(self, order_id: str, source: str) -> Submitted:
        torrent = resolve(source)
        if self._info(torrent.info_hash) is not None:
            return Submitted(torrent.info_hash, torrent.name, already=True)
        tags, save = f"acquire:{order_id}", self.save_path
        if torrent.data is not None:
            reply = self._api.torrents_add(torrent_files=torrent.data, tags=tags, save_path=save,
                                           is_paused=False)  # fmt: skip
        else:
            reply = self._api.torrents_add(urls=torrent.magnet, tags=tags, save_path=save,
                                           is_paused=False)  # fmt: skip
        faults.maybe("lose-add-reply")  # drills: qBittorrent took it, the reply is lost
        deadline = time.monotonic() + 10
        while self._info(torrent.info_hash) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"qBittorrent did not take the torrent (it said {reply!r})")
            time.sleep(0.05)
        return Submitted(torrent.info_hash, torrent.name)

    def status(self, info_hash: str, source: str | None = None) -> Status:
        info = self._info(info_hash)
        if info is None:
            return Status(exists=False, done=False, progress=0.0, state="missing",
                          content_path=None)  # fmt: skip
        progress = float(info.progress)
        done = progress >= 1.0 and info.state in DONE_STATES
        got: dict[str, Any] = dict(info)
        eta = int(got.get("eta", ETA_UNKNOWN))
        seeding = got.get("seeding_time")
        return Status(
            exists=True, done=done, progress=progress, state=str(info.state),
            content_path=str(info.content_path), done_bytes=int(got.get("completed", 0)),
            speed=int(got.get("dlspeed", 0)), eta=eta if 0 <= eta < ETA_UNKNOWN else None,
            ratio=float(got.get("ratio", 0.0)),
            seeding_time=float(seeding) if seeding is not None else None,
        )  # fmt: skip

    def remove(self, info_hash: str) -> None:
        self._api.torrents_delete(delete_files=True, torrent_hashes=info_hash)

    def order_of(self, info_hash: str) -> str | None:
        """The order id a torrent was tagged with, if any."""
        info = self._info(info_hash)
        if info is None:
            return None
        for tag in str(info.tags).split(","):
            if tag.strip().startswith("acquire:"):
                return tag.strip().removeprefix("acquire:")
        return None
