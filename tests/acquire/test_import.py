"""acquire's import with the `local` client, on both backends: with real worker processes,
multi-file releases under a template, hard links, kill -9 mid-import, free space and
status; with `durably.testing` skipping time, a 30-day download on the real poll schedule
(far longer than the step-attempt limit allows step by step)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from acquire import files, library, watch
from acquire import workflow as wf
from durably.testing import Environment
from tests.acquire.conftest import Acquire
from tests.helpers import duration, eventually_sync, scaled

RELEASE = "Film.Name.2001.1080p.BluRay.x264-GRP"
TEMPLATE = "{title} ({year})/{title} ({year}){ext}"
EXPECTED = {"Film Name (2001)/Film Name (2001).mkv", "Film Name (2001)/Film Name (2001).en.srt",
            "Film Name (2001)/Film Name (2001).fr.srt"}  # fmt: skip


def release(acq: Acquire, mb: int = 3) -> Path:
    """A finished folder download: film, a same-stem subtitle, Subs/, a sample, an extra."""
    root = acq.work / "downloads" / RELEASE
    (root / "Subs").mkdir(parents=True)
    (root / "Sample").mkdir()
    (root / f"{RELEASE}.mkv").write_bytes(os.urandom(mb * 1024 * 1024))
    (root / f"{RELEASE}.en.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nHello\n")
    (root / "Subs" / "French.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nBonjour\n")
    (root / "Sample" / "sample.mkv").write_bytes(os.urandom(1024))
    (root / "Film.Name.2001-trailer.mkv").write_bytes(os.urandom(1024))
    (root / "info.nfo").write_text("release notes")
    return root


def add(acq: Acquire, src: Path, order_id: str, *extra: str, lib: Path | None = None) -> str:
    out = acq.json("add", str(src), "--to", str(lib or acq.work / "library"), "--id", order_id,
                   "--client", "local", "--retention", "0.2s", *extra)  # fmt: skip
    return str(out["run_id"])


def status(acq: Acquire, order_id: str) -> str:
    return str(acq.order(order_id)["status"])


def tree(root: Path) -> set[str]:
    """Every file under `root` (hidden temporaries included), relative."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() \
        else set()  # fmt: skip


def same_inode(a: Path, b: Path) -> bool:
    return a.stat().st_ino == b.stat().st_ino and a.stat().st_dev == b.stat().st_dev


def assert_imported(acq: Acquire, src: Path, linked: bool) -> None:
    lib = acq.work / "library"
    assert tree(lib) == EXPECTED  # no sample, no extra, no temp file, no duplicate
    film = lib / "Film Name (2001)" / "Film Name (2001).mkv"
    assert files.same_file(src / f"{RELEASE}.mkv", film)
    assert same_inode(src / f"{RELEASE}.mkv", film) is linked
    assert (lib / "Film Name (2001)" / "Film Name (2001).fr.srt").read_text().endswith("Bonjour\n")


def test_multi_file_release_hard_linked_under_the_template(acq: Acquire) -> None:
    src = release(acq)
    acq.worker("A")
    add(acq, src, "m1", "--template", TEMPLATE)
    eventually_sync(lambda: status(acq, "m1") == "completed", timeout=30, what="the order")
    assert_imported(acq, src, linked=True)
    assert [e["order_id"] for e in library.entries(acq.url)] == ["m1"]
    assert tree(src.parent / RELEASE) >= {f"{RELEASE}.mkv"}  # the download is left alone


def test_title_and_year_options_win(acq: Acquire) -> None:
    src = release(acq, mb=1)
    acq.worker("A")
    add(acq, src, "m2", "--template", "{title} ({year}){ext}", "--title", "Other", "--year",
        "1999", "--link", "copy")  # fmt: skip
    eventually_sync(lambda: status(acq, "m2") == "completed", timeout=30, what="the order")
    lib = acq.work / "library"
    assert tree(lib) == {"Other (1999).mkv", "Other (1999).en.srt", "Other (1999).fr.srt"}
    assert not same_inode(src / f"{RELEASE}.mkv", lib / "Other (1999).mkv")


@pytest.mark.parametrize(("link", "fault"), [("hardlink", "kill-mid-import"),
                                             ("copy", "kill-mid-copy")])  # fmt: skip
def test_kill_9_mid_import_then_a_rerun_finishes(acq: Acquire, link: str, fault: str) -> None:
    src = release(acq)
    marker = acq.work / "fault-fired"
    lease = ("--lease", duration(2), "--heartbeat", duration(0.5))
    a = acq.worker("A", *lease, ACQUIRE_FAULT=f"{fault}:{marker}")
    add(acq, src, "k1", "--template", TEMPLATE, "--link", link)
    eventually_sync(lambda: a.poll() is not None, timeout=30, what="A to be killed mid-import")
    assert a.returncode == -signal.SIGKILL and marker.exists()
    lib = acq.work / "library"
    for name in tree(lib):  # whatever A left: whole files under final names, or temporaries
        if not Path(name).name.startswith("."):
            assert name in EXPECTED
    acq.worker("B", *lease)
    eventually_sync(lambda: status(acq, "k1") == "completed", timeout=30, what="B to finish")
    copies = [s["status"] for s in acq.order("k1")["steps"] if s["step"] == "copy-file"]
    assert copies == ["abandoned", "completed"]
    assert_imported(acq, src, linked=link == "hardlink")
    assert [e["order_id"] for e in library.entries(acq.url)] == ["k1"]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs the test mounts (root only), unmounted afterwards."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_too_little_free_space_fails_clearly_and_writes_nothing(
    acq: Acquire, small_fs: Path
) -> None:
    src = release(acq, mb=3)  # 3 MB to copy onto a 2 MB filesystem
    lib = small_fs / "library"
    acq.worker("A")
    add(acq, src, "s1", "--template", TEMPLATE, lib=lib)
    eventually_sync(lambda: status(acq, "s1") == "failed", timeout=30, what="the failure")
    order = acq.order("s1")
    message = order["error"]["message"]
    assert "not enough free space" in message and "needs 3.1 MB" in message, message
    assert "bytes) are free" in message
    assert tree(small_fs) == set()  # not a byte, not a folder's file
    assert library.entries(acq.url) == []


# SQLite only: time skipping no longer polls (it waits on the worker's activity), so
# what is left is the engine's own work, 2888 resumed runs (a claim, a replay, a check
# and a few records each): about 50 s here on SQLite, over 2 minutes on PostgreSQL, where
# time skipping is covered by tests/integration/testing/test_seven_days.py and test_testing_kit.py.
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.timeout(scaled(600))  # 2888 checks, each a resumed run: minutes when loaded
async def test_a_30_day_download_with_time_skipped(
    acq: Acquire, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 30 days at the real schedule (ACQUIRE_POLL 5s doubling up to ACQUIRE_POLL_MAX 15m,
    # both read when a watch starts) are 2888 checks; checked step by step (a wait and a
    # check each) that is 5776 step attempts, far past a run's limit of 1000: the watches
    # are child runs of at most `watch.CHECKS` checks (read at import) each.
    monkeypatch.delenv("ACQUIRE_POLL", raising=False)
    monkeypatch.delenv("ACQUIRE_POLL_MAX", raising=False)
    # Every resume of a watch replays its history: shorter watches, less to replay.
    # (The real 200 checks a watch doubles the time spent replaying.)
    monkeypatch.setattr(watch, "CHECKS", 50)
    assert (watch.poll_first(), watch.poll_max()) == (5.0, 900.0)
    lib = acq.work / "library"
    src = release(acq, mb=1)
    part = src / f"{RELEASE}.mkv.part"
    part.write_bytes(b"still downloading")
    database = "sqlite" if acq.url.startswith("sqlite") else acq.url
    wall = time.monotonic()
    async with Environment(wf.app, database=database, auto_skip=True) as env:
        library.ensure_tables(wf.app.url)  # the test database the environment points at
        order = wf.Order(id="w1", source=str(src), library=str(lib), client="local",
                         retention="1h", template=TEMPLATE)  # fmt: skip
        handle = await wf.acquire.start(order, idempotency_key="acquire:w1")
        begun = env.now()
        while env.now() - begun < timedelta(days=30):  # the real schedule, timer by timer
            assert await env.skip_time(timeout=scaled(30)) > timedelta(0), await handle.get()
        assert (await handle.get()).status in ("running", "waiting", "pending")
        part.unlink()  # the download completes once 30 days have passed
        output = await handle.result(timeout=scaled(60))  # the rest of the time skips
        run = await handle.get()
        watches = await wf.app.list_runs(workflow="acquire-watch", limit=1000)
        steps = await wf.app.list_steps(run.run_id)
        simulated = env.now() - begun
        entries = library.entries(wf.app.url)
    checks = max(int(w.output["watch"]["checks"]) for w in watches if w.status == "completed")
    print(f"\n30-day download ({database.split(':')[0]}): {simulated.total_seconds() / 86400:.2f}"
          f" simulated days, {checks} checks in {len(watches)} watches,"
          f" {time.monotonic() - wall:.1f}s wall")  # fmt: skip
    assert run.status == "completed" and run.attempts == 1
    assert output["files"] and tree(lib) == EXPECTED
    assert [e["order_id"] for e in entries] == ["w1"]
    assert checks >= 2880 and len(watches) >= -(-2880 // watch.CHECKS)
    assert all(w.status == "completed" for w in watches)
    waits = [s for s in steps if s.step == "wait-download"]
    assert len(waits) == len(watches) and len(steps) < 100


def test_status_lists_state_progress_speed_eta_and_watches(acq: Acquire) -> None:
    src = release(acq, mb=1)
    part = src / "extra-disc.mkv.part"
    part.write_bytes(os.urandom(1024 * 1024))
    acq.worker("A", ACQUIRE_POLL="50ms", ACQUIRE_POLL_MAX="50ms")
    add(acq, src, "st1", "--template", TEMPLATE)
    eventually_sync(lambda: acq.order("st1")["state"] == "downloading", timeout=30,
                    what="the download")  # fmt: skip
    doc = acq.order("st1")
    assert 0.4 < doc["progress"] < 0.6  # half the bytes are in finished files
    table = acq.cli("status").stdout
    for word in ("state", "progress", "speed", "ETA", "st1", "downloading"):
        assert word in table, table
    log = acq.work / "watch.log"
    acq.processes.start([*acq.cli_argv(), "status", "--watch", "--every", "0.1s"], log,
                        env=acq.env(), cwd=acq.work)  # fmt: skip
    eventually_sync(lambda: log.read_text().count("st1") >= 2, timeout=30, what="two refreshes")
    part.unlink()
    eventually_sync(lambda: "done" in log.read_text().split("orders")[-1], timeout=30,
                    what="the refreshed table to show the order done")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--template", "{title}{nope}{ext}"), "unknown template field {nope}"),
        (("--template", "{title} ({year})"), "must end with {ext}"),
        (("--template", "../{title}{ext}"), "inside the library"),
        (("--template", "{title"), "bad template"),
        (("--link", "symlink"), "--link must be"),
        (("--seed-time", "soon"), "invalid seed-time"),
        (("--seed-ratio", "0"), "invalid seed-ratio"),
        (("--stall", "-1h"), "invalid stall"),
        (("--template", "{title} ({year}){ext}", "--id", "plain"), "pass --year"),
    ],
)
def test_bad_options_start_nothing(acq: Acquire, args: tuple[str, ...], message: str) -> None:
    plain = acq.work / "downloads" / "movie.mkv"  # a name with no year in it
    plain.parent.mkdir(parents=True)
    plain.write_bytes(b"x")
    done = acq.cli("add", str(plain), "--to", str(acq.work / "library"), "--client", "local",
                   *args, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert acq.json("status") == []
