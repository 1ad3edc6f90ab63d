"""Payloads sealed at rest (SPEC §4.24): an app's `Codec` turns each payload's JSON text
into a token, stored as a JSON string that says what it is, `"durably:enc:t:TOKEN"` (or
`durably:enc:b:` and the URL-safe base64 of a codec's bytes). The stored form stays JSON,
so the columns keep their types and a run's history is still aggregated by SQL: a sealed
step result sits in it as a string, and is opened where the row is read (`open_text`,
the store's one seam for reads). The codec sees only bytes, so any key service fits:

    class Kms:
        def encode(self, data: bytes) -> bytes: return kms.encrypt(KEY_ID, data)
        def decode(self, data: bytes) -> bytes: return kms.decrypt(data)

    app = Durably(url, codec=Kms())

A value a reader cannot open (no codec, or none of its keys) reads as `"<encrypted>"`
(`ENCRYPTED`), and the row says so (see `store.sealed`): shown, never a crash. Plaintext
is always read as it is, so runs written before encryption was turned on (or by the SQL
functions, which cannot encrypt) keep working.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Protocol, runtime_checkable

from .errors import ConfigurationError

MARKER = "durably:enc:"
ENCRYPTED = "<encrypted>"
# The environment variable the worker, the CLI and the dashboard read their keys from.
KEYS_ENV = "DURABLY_CODEC_KEYS"
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=.+/")
# A sealed value in any JSON text: a string (its opening quote follows what may precede a
# value) holding the marker, a tag and the token; no escape can occur in it.
_SEALED = re.compile(r'(?:(?<=[\[,:{\s])|^)"durably:enc:([tb]):([A-Za-z0-9_=.+/-]*)"')
_SEALED_BYTES = re.compile(_SEALED.pattern.encode())
_QUOTED_MARKER = '"' + MARKER
ENCRYPTED_JSON = json.dumps(ENCRYPTED)


@runtime_checkable
class Codec(Protocol):
    """What turns a payload's bytes (its JSON text, UTF-8) into what is stored, and back.

    `encode` returns bytes (stored base64-encoded) or text of URL-safe base64 characters
    (stored as it is, e.g. a Fernet token); `decode` receives exactly that (text as its
    ASCII bytes) and returns the original bytes, or raises if it cannot (a key it lacks).
    Each call may return a different token for the same bytes (Fernet does): durably never
    compares stored tokens, only the values they open to.
    """

    def encode(self, data: bytes) -> bytes | str: ...

    def decode(self, data: bytes) -> bytes: ...


class Stored(str):
    """JSON text as stored (sealed), carrying the plain JSON text it seals, so the value a
    workflow sees goes on without opening what was just sealed (see `codec.decode`)."""

    plain: str

    def __new__(cls, stored: str, plain: str) -> Stored:
        self = super().__new__(cls, stored)
        self.plain = plain
        return self


class Opened(str):
    """JSON text read from the store with its sealed values opened, carrying the text as
    it was stored: written back as it is (a signal's data taken by a wait, say), it is
    written sealed (see `as_stored`)."""

    stored: str

    def __new__(cls, opened: str, stored: str) -> Opened:
        self = super().__new__(cls, opened)
        self.stored = stored
        return self


def as_stored(text: str) -> str:
    """`text` as it is to be written: an `Opened` text as it was stored."""
    return text.stored if type(text) is Opened else text


def seal(plain: str, codec: Codec) -> Stored:
    """The stored form of JSON text `plain`: a JSON string holding the codec's token."""
    token = codec.encode(plain.encode())
    if isinstance(token, bytes):
        body = "b:" + base64.urlsafe_b64encode(token).decode()
    elif isinstance(token, str) and token and set(token) <= _TOKEN_CHARS:
        body = "t:" + token
    else:
        raise ConfigurationError(
            f"the codec {type(codec).__name__} returned {type(token).__name__}: a codec's "
            "encode returns bytes, or text of URL-safe base64 characters"
        )
    return Stored(f'"{MARKER}{body}"', plain)


def looks_sealed(data: bytes) -> bool:
    """Whether JSON text `data` holds what a reader would open as sealed: a plain value
    may not (it would read as something else)."""
    return b'"durably:enc:' in data and _SEALED_BYTES.search(data) is not None


def open_text(text: str, codec: Codec | None) -> tuple[str, bool]:
    """JSON text with every sealed value in it replaced by the JSON text it seals, and
    whether every one could be opened (one that could not reads as `"<encrypted>"`)."""
    if _QUOTED_MARKER not in text:
        return text, True
    opened = True

    def plain(match: re.Match[str]) -> str:
        nonlocal opened
        found = _open(match.group(1), match.group(2), codec)
        if found is None:
            opened = False
            return ENCRYPTED_JSON
        return found

    return _SEALED.sub(plain, text), opened


def _open(tag: str, token: str, codec: Codec | None) -> str | None:
    if codec is None:
        return None
    try:
        data = base64.urlsafe_b64decode(token) if tag == "b" else token.encode()
        return codec.decode(data).decode()
    except Exception:  # a key it lacks, a token it does not know (InvalidToken, a KMS' own)
        return None


def codec_from_env() -> Codec | None:
    """A `FernetCodec` of the keys in `DURABLY_CODEC_KEYS` (comma-separated, the first
    encrypts), or None if it is unset or empty."""
    keys = [k.strip() for k in os.environ.get(KEYS_ENV, "").split(",") if k.strip()]
    if not keys:
        return None
    from .fernet import FernetCodec

    return FernetCodec(keys)
