"""What identifies a download before it is added: the info hash of a torrent or magnet.

Knowing the hash first lets a retried submit find a torrent that the client accepted even
though its reply was lost, instead of adding it twice.
"""

from __future__ import annotations

import base64
import hashlib
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path


class BadSource(ValueError):
    """The source is not a usable magnet link, .torrent file or URL, or local file."""


@dataclass(frozen=True)
class Torrent:
    """A torrent to add: its v1 info hash, a display name, and how to hand it over."""

    info_hash: str
    name: str
    magnet: str | None = None
    data: bytes | None = None


def _bdecode_end(buf: bytes, i: int) -> int:
    """The index just past the bencoded value starting at `i`."""
    c = buf[i : i + 1]
    if c == b"i":
        return buf.index(b"e", i) + 1
    if c in (b"l", b"d"):
        i += 1
        while buf[i : i + 1] != b"e":
            i = _bdecode_end(buf, i)
        return i + 1
    if c.isdigit():
        colon = buf.index(b":", i)
        return colon + 1 + int(buf[i:colon])
    raise BadSource("not a bencoded torrent file")


def _info_slice(buf: bytes) -> tuple[int, int]:
    """Where the raw `info` dictionary sits in a .torrent file."""
    if buf[:1] != b"d":
        raise BadSource("not a torrent file (it must be a bencoded dictionary)")
    i = 1
    while buf[i : i + 1] != b"e":
        key_end = _bdecode_end(buf, i)
        colon = buf.index(b":", i)
        key = buf[colon + 1 : key_end]
        value_end = _bdecode_end(buf, key_end)
        if key == b"info":
            return key_end, value_end
        i = value_end
    raise BadSource("the torrent file has no info dictionary")


def _name(info: bytes) -> str:
    m = re.search(rb"4:name(\d+):", info)
    if not m:
        return "download"
    start = m.end()
    return info[start : start + int(m.group(1))].decode(errors="replace")


def from_torrent_bytes(data: bytes) -> Torrent:
    try:
        start, end = _info_slice(data)
    except (IndexError, ValueError) as exc:
        raise BadSource(f"not a valid .torrent file: {exc}") from None
    info = data[start:end]
    return Torrent(hashlib.sha1(info).hexdigest(), _name(info), data=data)


def from_magnet(uri: str) -> Torrent:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query)
    for xt in query.get("xt", []):
        if xt.startswith("urn:btih:"):
            h = xt.removeprefix("urn:btih:")
            if re.fullmatch(r"[0-9a-fA-F]{40}", h):
                return Torrent(h.lower(), query.get("dn", ["download"])[0], magnet=uri)
            if re.fullmatch(r"[A-Z2-7a-z]{32}", h):
                hexhash = base64.b32decode(h.upper()).hex()
                return Torrent(hexhash, query.get("dn", ["download"])[0], magnet=uri)
    raise BadSource(
        f"malformed magnet link {uri!r}: it needs xt=urn:btih:<40 hex or 32 base32 characters>"
    )


def resolve(source: str) -> Torrent:
    """The torrent a source names: a magnet link, a .torrent path, or a .torrent URL."""
    if source.startswith("magnet:"):
        return from_magnet(source)
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=30) as resp:
                return from_torrent_bytes(resp.read())
        except OSError as exc:
            raise BadSource(f"cannot fetch {source}: {exc}") from None
    path = Path(source)
    if not path.is_file():
        raise BadSource(f"no such .torrent file: {source}")
    return from_torrent_bytes(path.read_bytes())
