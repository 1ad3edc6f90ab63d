"""acquire against two real qbittorrent-nox daemons on 127.0.0.1: one seeds a generated
file, the other downloads it for the workflow; its finish hook runs `acquire notify`."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import torf

from acquire import files, library
from tests import qbt
from tests.acquire.conftest import ROOT, Acquire
from tests.helpers import eventually_sync
from tests.processes import Processes

pytestmark = pytest.mark.skipif(
    not qbt.available() and not os.environ.get("CI"),
    reason="qbittorrent-nox is not installed (apt-get install qbittorrent-nox)",
)


class Swarm:
    """A seeder with a generated file, and a downloader the workflow talks to."""

    def __init__(self, work: Path, url: str, processes: Processes) -> None:
        self.work = work
        self.seeder = qbt.Daemon(work, "seeder").start(processes)
        hook = work / "hook.sh"
        hook.write_text(
            "#!/bin/sh\n"
            f"export DURABLY_DATABASE_URL='{url}' PYTHONPATH='{ROOT}'\n"
            f"export QBITTORRENT_URL='http://127.0.0.1:{{port}}'\n"
            f'exec {sys.executable} -m acquire.cli notify "$1" "$2" >> {work}/hook.log 2>&1\n'
        )
        self.downloader = qbt.Daemon(work, "downloader")
        hook.write_text(hook.read_text().replace("{port}", str(self.downloader.web_port)))
        hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
        self.downloader.start(processes, autorun=f"{hook} %I %F")

    def seed(self, name: str, mb: int) -> tuple[Path, Path, str]:
        """A file the seeder has complete, its .torrent, and the info hash."""
        content = self.seeder.save / name
        content.write_bytes(os.urandom(mb * 1024 * 1024))
        t = torf.Torrent(path=content, private=False, created_by=None, creation_date=None)
        t.generate()
        torrent = self.work / f"{name}.torrent"
        t.write(torrent)
        api = self.seeder.api()
        api.torrents_add(torrent_files=torrent.read_bytes(), save_path=str(self.seeder.save))
        eventually_sync(lambda: _progress(api, t.infohash) == 1.0, timeout=30,
                        what="the seeder to check its data")  # fmt: skip
        return content, torrent, str(t.infohash)

    def connect(self, info_hash: str) -> None:
        """Point the downloader at the seeder once it has the torrent (no DHT here)."""
        api = self.downloader.api()
        eventually_sync(lambda: api.torrents_info(torrent_hashes=info_hash), timeout=30,
                        what="the downloader to have the torrent")  # fmt: skip
        api.torrents_add_peers(peers=f"127.0.0.1:{self.seeder.bt_port}", torrent_hashes=info_hash)

    def env(self) -> dict[str, str]:
        return {"QBITTORRENT_URL": self.downloader.url, "QBITTORRENT_PASSWORD": qbt.PASSWORD,
                "QBITTORRENT_SAVE_PATH": str(self.downloader.save)}  # fmt: skip


def _progress(api: Any, info_hash: str) -> float | None:
    found = api.torrents_info(torrent_hashes=info_hash)
    return float(found[0].progress) if found else None


@pytest.fixture
def swarm(acq: Acquire) -> Swarm:
    s = Swarm(acq.work, acq.url, acq.processes)
    acq.base_env.update(s.env())
    return s


def _add(acq: Acquire, torrent: Path, order_id: str) -> None:
    acq.json("add", str(torrent), "--to", str(acq.work / "library"), "--id", order_id,
             "--client", "qbittorrent", "--retention", "0.5s")  # fmt: skip


def test_download_copy_register_cleanup(acq: Acquire, swarm: Swarm) -> None:
    content, torrent, info_hash = swarm.seed("film.mkv", 8)
    acq.worker("A", ACQUIRE_POLL="1h")  # only the finish hook can end the wait
    _add(acq, torrent, "q1")
    swarm.connect(info_hash)
    eventually_sync(lambda: acq.order("q1")["status"] == "completed", timeout=60,
                    what="the order")  # fmt: skip
    steps = acq.order("q1")["steps"]
    waits = [s for s in steps if s["step"] == "wait-download"]
    assert [w["status"] for w in waits] == ["completed"]  # the hook's signal, not a timeout
    assert files.same_file(content, acq.work / "library" / "film.mkv")
    assert [e["order_id"] for e in library.entries(acq.url)] == ["q1"]
    down = swarm.downloader.api()
    eventually_sync(lambda: not down.torrents_info(), timeout=10, what="cleanup")
    eventually_sync(lambda: not (swarm.downloader.save / "film.mkv").exists(), timeout=10,
                    what="the downloaded data to be removed")  # fmt: skip
    assert (acq.work / "hook.log").exists()


def test_add_accepted_but_reply_lost(acq: Acquire, swarm: Swarm) -> None:
    content, torrent, info_hash = swarm.seed("lost.mkv", 2)
    marker = acq.work / "fault-fired"
    acq.worker("A", ACQUIRE_FAULT=f"lose-add-reply:{marker}")
    _add(acq, torrent, "q2")
    swarm.connect(info_hash)
    eventually_sync(lambda: acq.order("q2")["status"] == "completed", timeout=60,
                    what="the order")  # fmt: skip
    assert marker.exists()
    submits = [s["status"] for s in acq.order("q2")["steps"] if s["step"] == "submit-download"]
    assert submits == ["failed", "completed"]  # the retry found the torrent instead of re-adding
    assert [e["order_id"] for e in library.entries(acq.url)] == ["q2"]
    assert files.same_file(content, acq.work / "library" / "lost.mkv")


def test_cancel_during_download_removes_torrent_and_data(acq: Acquire, swarm: Swarm) -> None:
    _, torrent, info_hash = swarm.seed("never.mkv", 2)
    acq.worker("A")
    _add(acq, torrent, "q3")  # no peer is ever given: the download stays at 0 %
    down = swarm.downloader.api()
    eventually_sync(lambda: down.torrents_info(torrent_hashes=info_hash), timeout=30,
                    what="the downloader to have it")  # fmt: skip
    assert "canceled" in acq.cli("cancel", "q3").stdout
    eventually_sync(lambda: not down.torrents_info(), timeout=30, what="the compensation")
    order = acq.order("q3")
    assert order["status"] == "canceled"
    assert "compensate:submit-download" in [s["step"] for s in order["steps"]]
    assert library.entries(acq.url) == []
