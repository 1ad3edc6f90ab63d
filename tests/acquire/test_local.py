"""acquire with the `local` client: the pipeline, bad input, and copy faults (real
worker processes, kill -9, SIGSTOP), on both backends."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from acquire import files, library
from tests.acquire.conftest import Acquire
from tests.helpers import duration, eventually_sync, freeze_outside_a_write, let_go, scaled


def _source(acq: Acquire, name: str = "movie.mkv", mb: int = 3) -> Path:
    src = acq.work / "downloads" / name
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(os.urandom(mb * 1024 * 1024))
    return src


def _add(acq: Acquire, src: Path, order_id: str, *extra: str) -> str:
    out = acq.json("add", str(src), "--to", str(acq.work / "library"), "--id", order_id,
                   "--client", "local", "--retention", "0.2s", *extra)  # fmt: skip
    return str(out["run_id"])


def _completed(acq: Acquire, order_id: str) -> bool:
    return bool(acq.order(order_id)["status"] == "completed")


def test_local_pipeline_end_to_end(acq: Acquire) -> None:
    src = _source(acq)
    acq.worker("A")
    _add(acq, src, "o1")
    eventually_sync(lambda: _completed(acq, "o1"), timeout=30, what="the order")
    order = acq.order("o1")
    assert [s["step"] for s in order["steps"]][:2] == ["submit-download", "wait-download"]
    assert [s["step"] for s in order["steps"]][-4:] == ["copy-file", "register", "retention",
                                                        "cleanup"]  # fmt: skip
    dest = acq.work / "library" / "movie.mkv"
    assert files.same_file(src, dest)
    assert [e["order_id"] for e in library.entries(acq.url)] == ["o1"]
    assert "o1" in acq.cli("status").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "/nonexistent/movie.mkv", "--client", "local"), "does not exist"),
        (("add", "magnet:?xt=urn:btih:xyz", "--client", "qbittorrent"), "malformed magnet"),
        (("add", "/nonexistent.torrent", "--client", "qbittorrent"), "no such .torrent"),
        (("add", "SRC", "--client", "local", "--id", "bad id!"), "invalid id"),
        (("add", "SRC", "--client", "local", "--retention", "forever"), "invalid retention"),
        (("add", "SRC", "--client", "ftp"), "--client must be"),
    ],
)
def test_bad_input_starts_nothing(acq: Acquire, args: tuple[str, ...], message: str) -> None:
    src = _source(acq, mb=1)
    argv = [str(src) if a == "SRC" else a for a in args]
    done = acq.cli(*argv, "--to", str(acq.work / "library"), check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert acq.json("status") == []


def test_unwritable_library_starts_nothing(acq: Acquire) -> None:
    src = _source(acq, mb=1)
    blocker = acq.work / "a-file"
    blocker.write_text("not a directory")
    done = acq.cli("add", str(src), "--to", str(blocker / "library"), "--client", "local",
                   check=False)  # fmt: skip
    assert done.returncode == 2 and "not writable" in done.stderr
    assert acq.json("status") == []


def test_worker_killed_after_rename_before_record(acq: Acquire) -> None:
    src = _source(acq)
    marker = acq.work / "fault-fired"
    lease = ("--lease", duration(2), "--heartbeat", duration(0.5))
    a = acq.worker("A", *lease, ACQUIRE_FAULT=f"kill-after-rename:{marker}")
    _add(acq, src, "o2")
    eventually_sync(lambda: a.poll() is not None, timeout=30, what="A to die after the rename")
    assert a.returncode == -signal.SIGKILL and marker.exists()
    acq.worker("B", *lease)
    eventually_sync(lambda: _completed(acq, "o2"), timeout=30, what="B to finish")
    copies = [s for s in acq.order("o2")["steps"] if s["step"] == "copy-file"]
    assert [c["status"] for c in copies] == ["abandoned", "completed"]
    assert files.same_file(src, acq.work / "library" / "movie.mkv")
    assert [e["order_id"] for e in library.entries(acq.url)] == ["o2"]
    assert not list((acq.work / "library").glob(".*partial"))


def test_frozen_worker_during_copy(acq: Acquire) -> None:
    src = _source(acq, mb=round(scaled(8)))  # 0.3 s a MB: the window to freeze A in
    lease = ("--lease", duration(1), "--heartbeat", duration(0.3))
    a = acq.worker("A", *lease, ACQUIRE_FAULT="slow-copy:0.3")
    run_id = _add(acq, src, "o3", "--link", "copy")
    lib = acq.work / "library"
    eventually_sync(lambda: lib.exists() and list(lib.glob(".*partial")), timeout=30,
                    what="A to be copying")  # fmt: skip
    freeze_outside_a_write(a, acq.url)
    acq.worker("B", *lease)
    eventually_sync(lambda: _completed(acq, "o3"), timeout=60, what="B to take over")
    os.killpg(a.pid, signal.SIGCONT)
    log = acq.work / "worker-A.log"
    eventually_sync(lambda: let_go(log.read_text(), run_id), timeout=15, what="A to stop")
    eventually_sync(lambda: not list(lib.glob(".*partial")), timeout=15, what="A's temp file")
    assert files.same_file(src, lib / "movie.mkv")
    assert [e["order_id"] for e in library.entries(acq.url)] == ["o3"]
    registers = [s for s in acq.order("o3")["steps"] if s["step"] == "register"]
    assert [r["status"] for r in registers] == ["completed"]


def test_cancel_an_order(acq: Acquire) -> None:
    # 0.5 s a MB: the cancel (a CLI call, slow on a loaded machine) must land mid-copy.
    src = _source(acq, mb=round(scaled(40)))
    acq.worker("A", ACQUIRE_FAULT="slow-copy:0.5")
    _add(acq, src, "o4", "--link", "copy")
    lib = acq.work / "library"
    eventually_sync(lambda: lib.exists() and list(lib.glob(".*partial")), timeout=30,
                    what="the copy")  # fmt: skip
    assert "canceled" in acq.cli("cancel", "o4").stdout
    eventually_sync(lambda: not list(lib.glob(".*partial")), timeout=5, what="the copy to stop")
    assert not (lib / "movie.mkv").exists()
    assert library.entries(acq.url) == []
    again = acq.cli("cancel", "o4", check=False)
    assert again.returncode == 1 and "already canceled" in again.stderr
