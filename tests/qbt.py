"""A real qbittorrent-nox on loopback, kept off the internet (see shared/QBITTORRENT.md)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import qbittorrentapi

from tests.helpers import eventually_sync, scaled, tail
from tests.pgcluster import free_port
from tests.processes import Processes

PASSWORD = "adminadmin"


def available() -> bool:
    return shutil.which("qbittorrent-nox") is not None


def _password_hash(password: str) -> str:
    salt = os.urandom(16)
    key = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 100_000, 64)
    return f'"@ByteArray({base64.b64encode(salt).decode()}:{base64.b64encode(key).decode()})"'


class Daemon:
    """One qbittorrent-nox with a fresh profile, free ports and its own save directory;
    the process belongs to the `processes` it was started with, which stops it."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root / name
        self.profile = self.root / "profile"
        self.save = self.root / "save"
        self.web_port = free_port()
        self.bt_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def _config(self, autorun: str | None) -> str:
        lines = [
            "[LegalNotice]", "Accepted=true", "",
            "[Network]", "PortForwardingEnabled=false", "",
            "[BitTorrent]", f"Session\\Port={self.bt_port}", "Session\\Interface=lo",
            "Session\\InterfaceName=lo", "Session\\InterfaceAddress=127.0.0.1",
            "Session\\DHTEnabled=false", "Session\\LSDEnabled=false", "Session\\PeXEnabled=false",
            "Session\\BTProtocol=TCP", "Session\\IgnoreLimitsOnLAN=true",
            "Session\\QueueingSystemEnabled=false", f"Session\\DefaultSavePath={self.save}",
            "Session\\AddTorrentPaused=false", "Session\\RefreshInterval=200", "",
            "[Preferences]", "Connection\\ResolvePeerCountries=false",
            "WebUI\\Address=127.0.0.1", f"WebUI\\Port={self.web_port}", "WebUI\\UseUPnP=false",
            "WebUI\\LocalHostAuth=true", "WebUI\\Username=admin",
            f"WebUI\\Password_PBKDF2={_password_hash(PASSWORD)}",
            "WebUI\\MaxAuthenticationFailCount=0", "",
        ]  # fmt: skip
        if autorun:
            lines += ["[AutoRun]", "enabled=true", f'program="{autorun}"', ""]
        return "\n".join(lines)

    def start(self, processes: Processes, autorun: str | None = None) -> Daemon:
        """Start the daemon (owned by `processes`) and return once its WebUI answers."""
        config = self.profile / "qBittorrent" / "config"
        config.mkdir(parents=True)
        self.save.mkdir(parents=True, exist_ok=True)
        (config / "qBittorrent.conf").write_text(self._config(autorun))
        self.proc = processes.start(
            ["qbittorrent-nox", f"--profile={self.profile}", f"--webui-port={self.web_port}"],
            self.root / "daemon.log",
        )
        eventually_sync(self._answers, timeout=30, what=f"qBittorrent's WebUI at {self.url}")
        return self

    def _answers(self) -> bool:
        """Whether the WebUI takes a login; a daemon that died or refused it fails at once."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = (self.root / "daemon.log").read_text(errors="replace")
            raise RuntimeError(f"qbittorrent-nox exited {self.proc.returncode}:\n{log}")
        try:
            self.api().auth_log_in()
        except qbittorrentapi.LoginFailed:
            raise
        except qbittorrentapi.APIConnectionError:
            return False  # not listening yet
        return True

    def diagnostics(self) -> str:
        """Its torrents as its API shows them (state, progress, peers) and its log's tail."""
        try:
            torrents = (
                "\n".join(
                    f"{t.hash} {t.name!r} state={t.state} progress={t.progress:.3f} "
                    f"seeds={t.num_seeds} peers={t.num_leechs} tags={t.tags!r}"
                    for t in self.api().torrents_info()
                )
                or "(none)"
            )
        except qbittorrentapi.APIError as exc:
            torrents = f"the API failed: {exc!r}"
        log = self.profile / "qBittorrent" / "data" / "logs" / "qbittorrent.log"
        alive = "running" if self.proc and self.proc.poll() is None else "not running"
        log_tail = tail(log, 25, drop="WebAPI login success")  # a line per API client
        return f"{self.root.name} ({alive}) torrents:\n{torrents}\n{log_tail}"

    def api(self) -> qbittorrentapi.Client:
        """A client of this daemon's WebUI, over plain HTTP.

        Without FORCE_SCHEME_FROM_HOST, qbittorrent-api probes the scheme on its first
        request and, if the daemon does not answer over HTTP yet, falls back to HTTPS for
        the client's lifetime (an SSLEOFError on a daemon that speaks only HTTP).
        """
        return qbittorrentapi.Client(host=self.url, username="admin", password=PASSWORD,
                                     FORCE_SCHEME_FROM_HOST=True,
                                     REQUESTS_ARGS={"timeout": scaled(10)})  # fmt: skip
