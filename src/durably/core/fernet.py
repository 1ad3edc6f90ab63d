"""`FernetCodec`: payloads encrypted at rest with Fernet (AES-128-CBC and HMAC-SHA256, from
the `cryptography` library: `pip install "durably[crypto]"`), several keys for rotation.

The first key encrypts; any of them decrypts. To rotate: put a new key first and keep the
old ones after it until nothing stored under them is still needed (a run's history is read
by every claim of it). `FernetCodec.generate_key()` makes a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import ConfigurationError

_HINT = 'FernetCodec needs the cryptography library: pip install "durably[crypto]"'


def _fernet() -> Any:
    try:
        from cryptography import fernet
    except ImportError:  # pragma: no cover - the dev environment has it
        raise ConfigurationError(_HINT) from None
    return fernet


class FernetCodec:
    """A `Codec` (see `durably.Codec`) encrypting with the first of `keys` (URL-safe
    base64 of 32 bytes, text or bytes, or one comma-separated text) and decrypting with
    any of them."""

    def __init__(self, keys: str | bytes | Sequence[str | bytes]) -> None:
        fernet = _fernet()
        if isinstance(keys, str):
            keys = [k.strip() for k in keys.split(",") if k.strip()]
        elif isinstance(keys, bytes):
            keys = [keys]
        if not keys:
            raise ConfigurationError("FernetCodec needs at least one key")
        try:
            ciphers = [fernet.Fernet(k) for k in keys]
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"a FernetCodec key is not a Fernet key ({exc}): make one with "
                "FernetCodec.generate_key()"
            ) from None
        self._multi = fernet.MultiFernet(ciphers)

    @staticmethod
    def generate_key() -> str:
        """A new random key (URL-safe base64 text)."""
        key: bytes = _fernet().Fernet.generate_key()
        return key.decode()

    def encode(self, data: bytes) -> str:
        token: bytes = self._multi.encrypt(data)
        return token.decode()

    def decode(self, data: bytes) -> bytes:
        plain: bytes = self._multi.decrypt(data)
        return plain

    def __repr__(self) -> str:
        return "<FernetCodec>"  # never the keys
