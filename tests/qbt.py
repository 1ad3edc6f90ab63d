"""A real qbittorrent-nox on loopback, kept off the internet (see shared/QBITTORRENT.md)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import qbittorrentapi

from tests.helpers import scaled
from tests.pgcluster import free_port

PASSWORD = "adminadmin"


def available() -> bool:
    return shutil.which("qbittorrent-nox") is not None


def _password_hash(password: str) -> str:
    salt = os.urandom(16)
    key = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 100_000, 64)
    return f'"@ByteArray({base64.b64encode(salt).decode()}:{base64.b64encode(key).decode()})"'


class Daemon:
    """One qbittorrent-nox with a fresh profile, free ports and its own save directory."""

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

    def start(self, autorun: str | None = None) -> Daemon:
        config = self.profile / "qBittorrent" / "config"
        config.mkdir(parents=True)
        self.save.mkdir(parents=True, exist_ok=True)
        (config / "qBittorrent.conf").write_text(self._config(autorun))
        with open(self.root / "daemon.log", "wb") as log:
            self.proc = subprocess.Popen(
                ["qbittorrent-nox", f"--profile={self.profile}", f"--webui-port={self.web_port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + scaled(30)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"qbittorrent-nox exited {self.proc.returncode}")
            try:
                self.api().auth_log_in()
                return self
            except qbittorrentapi.LoginFailed:
                raise
            except qbittorrentapi.APIConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def api(self) -> qbittorrentapi.Client:
        return qbittorrentapi.Client(host=self.url, username="admin", password=PASSWORD,
                                     REQUESTS_ARGS={"timeout": scaled(10)})  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
