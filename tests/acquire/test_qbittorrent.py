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
from tests.helpers import eventually_sync, tail
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

    def seed(self, name: str, mb: int, folder: dict[str, bytes] | None = None
             ) -> tuple[Path, Path, str]:  # fmt: skip
        """A file (or a folder of `folder`'s files) the seeder has complete, its .torrent,
        and the info hash."""
        content = self.seeder.save / name
        if folder is None:
            content.write_bytes(os.urandom(mb * 1024 * 1024))
        for rel, data in (folder or {}).items():
            (content / rel).parent.mkdir(parents=True, exist_ok=True)
            (content / rel).write_bytes(data)
        t = torf.Torrent(path=content, private=False, created_by=None, creation_date=None)
        t.generate()
        torrent = self.work / f"{name}.torrent"
        t.write(torrent)
        api = self.seeder.api()
        api.torrents_add(torrent_files=torrent.read_bytes(), save_path=str(self.seeder.save))
        eventually_sync(lambda: _progress(api, t.infohash) == 1.0, timeout=30,
                        what="the seeder to check its data")  # fmt: skip
        return content, torrent, str(t.infohash)

    def connect(self, info_hash: str, both_ways: bool = True) -> None:
        """Point the downloader at the seeder once it has the torrent (no DHT here), and
        the seeder at the downloader: libtorrent tries a refused peer again only (failures
        + 1) x 60 s later (a refused first attempt delayed a download by 115 s), and a
        connection from the other side does not wait for that."""
        api = self.downloader.api()
        eventually_sync(lambda: api.torrents_info(torrent_hashes=info_hash), timeout=30,
                        what="the downloader to have the torrent")  # fmt: skip
        api.torrents_add_peers(peers=f"127.0.0.1:{self.seeder.bt_port}", torrent_hashes=info_hash)
        if both_ways:
            self.seeder.api().torrents_add_peers(
                peers=f"127.0.0.1:{self.downloader.bt_port}", torrent_hashes=info_hash
            )

    def diagnostics(self) -> str:
        """What tells a hook that never ran or failed from a download that never ended."""
        return "\n".join([tail(self.work / "hook.log"), self.seeder.diagnostics(),
                          self.downloader.diagnostics()])  # fmt: skip

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


def _add(acq: Acquire, torrent: Path, order_id: str, *extra: str) -> None:
    acq.json("add", str(torrent), "--to", str(acq.work / "library"), "--id", order_id,
             "--client", "qbittorrent", "--retention", "0.5s", *extra)  # fmt: skip


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


RELEASE = "Film.Name.2001.1080p.BluRay.x264-GRP"


def _state(acq: Acquire, order_id: str) -> str:
    return str(acq.order(order_id)["state"])


def test_multi_file_torrent_imported_as_hard_links(acq: Acquire, swarm: Swarm) -> None:
    film = os.urandom(6 * 1024 * 1024)
    folder = {f"{RELEASE}.mkv": film, f"{RELEASE}.en.srt": b"1\n00:00:01,000 --> x\nHi\n",
              "Subs/French.srt": b"1\n00:00:01,000 --> x\nSalut\n",
              "Sample/sample.mkv": os.urandom(256 * 1024), "release.nfo": b"notes"}  # fmt: skip
    _, torrent, info_hash = swarm.seed(RELEASE, 0, folder)
    acq.worker("A")
    _add(acq, torrent, "q4", "--template", "{title} ({year})/{title} ({year}){ext}",
         "--seed-time", "1h")  # fmt: skip
    swarm.connect(info_hash)
    eventually_sync(lambda: _state(acq, "q4") == "seeding", timeout=60, what="the import")
    lib = acq.work / "library" / "Film Name (2001)"
    assert {p.name for p in lib.iterdir()} == {"Film Name (2001).mkv", "Film Name (2001).en.srt",
                                               "Film Name (2001).fr.srt"}  # fmt: skip
    downloaded = swarm.downloader.save / RELEASE / f"{RELEASE}.mkv"
    assert (lib / "Film Name (2001).mkv").stat().st_ino == downloaded.stat().st_ino
    assert (lib / "Film Name (2001).mkv").read_bytes() == film
    assert (lib / "Film Name (2001).fr.srt").read_bytes().endswith(b"Salut\n")
    assert [e["order_id"] for e in library.entries(acq.url)] == ["q4"]


def test_seeding_goal_by_ratio_through_the_second_daemon(acq: Acquire, swarm: Swarm) -> None:
    content, torrent, info_hash = swarm.seed("ratio.mkv", 4)
    acq.worker("A")
    _add(acq, torrent, "q5", "--seed-ratio", "0.5", "--seed-time", "30d")
    swarm.connect(info_hash)
    eventually_sync(lambda: _state(acq, "q5") == "seeding", timeout=60, what="seeding")
    # The seeder forgets the file and fetches it back from the workflow's daemon: that
    # upload is what raises its ratio.
    seeder = swarm.seeder.api()
    seeder.torrents_delete(delete_files=True, torrent_hashes=info_hash)
    eventually_sync(lambda: not content.exists(), timeout=30, what="the seeder's data to go")
    again = swarm.seeder.root / "again"
    seeder.torrents_add(torrent_files=torrent.read_bytes(), save_path=str(again))
    eventually_sync(lambda: seeder.torrents_info(torrent_hashes=info_hash), timeout=30,
                    what="the seeder to have it again")  # fmt: skip
    seeder.torrents_add_peers(peers=f"127.0.0.1:{swarm.downloader.bt_port}",
                              torrent_hashes=info_hash)  # fmt: skip
    eventually_sync(lambda: acq.order("q5")["status"] == "completed", timeout=60,
                    what="the ratio goal and the cleanup")  # fmt: skip
    assert _progress(seeder, info_hash) == 1.0
    down = swarm.downloader.api()
    eventually_sync(lambda: not down.torrents_info(), timeout=10, what="cleanup")
    assert files.same_file(again / "ratio.mkv", acq.work / "library" / "ratio.mkv")


def test_stalled_download_fails_and_is_cleaned(acq: Acquire, swarm: Swarm) -> None:
    _, torrent, info_hash = swarm.seed("stall.mkv", 2)
    assert swarm.seeder.proc is not None
    swarm.seeder.proc.terminate()  # the only peer is gone: the download cannot progress
    swarm.seeder.proc.wait(timeout=30)
    acq.worker("A")
    _add(acq, torrent, "q6", "--stall", "2s")
    swarm.connect(info_hash, both_ways=False)  # the seeder is gone
    eventually_sync(lambda: acq.order("q6")["status"] == "failed", timeout=60, what="the stall")
    order = acq.order("q6")
    assert order["state"] == "stalled"
    assert order["error"]["message"].startswith("stalled: no progress for 2s")
    assert "compensate:submit-download" in [s["step"] for s in order["steps"]]
    down = swarm.downloader.api()
    eventually_sync(lambda: not down.torrents_info(), timeout=30, what="the torrent removed")
    assert not (swarm.downloader.save / "stall.mkv").exists()
    assert library.entries(acq.url) == []
