"""Payloads are JSON: anything pydantic can serialize goes in, plain JSON (or the declared
type, validated) comes out. The value a workflow sees is always the decoded stored form,
and the stored form is this text, kept as it is (PostgreSQL `json`, SQLite TEXT): a replay
sees exactly what the first execution saw, key order and every float included. Never pickle.

What JSON cannot hold is refused here, once for both backends (SPEC §4.20): NaN and
±Infinity (pydantic writes them as bare `NaN`/`Infinity`, which no JSON reader takes),
U+0000 (PostgreSQL cannot store it in JSON text; SQLite could, but a run must not depend on
its backend), and an int of more than 4300 digits (Python's reader refuses it)."""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

import pydantic_core
from pydantic import TypeAdapter, ValidationError

from .errors import InvalidInput, PayloadTooLarge
from .sealing import MARKER, looks_sealed, seal

if TYPE_CHECKING:
    from .sealing import Codec

DEFAULT_MAX_PAYLOAD = 1024 * 1024
# Python's JSON reader refuses an int of more digits (int's default max_str_digits): a row
# holding one could be written, never read back.
INT_DIGITS = 4300
_BARE = re.compile(rb"(?:^|[\[:,])-?(?:NaN|Infinity|[0-9]{%d})" % (INT_DIGITS + 1))
# A run's history is read whole by every claim of it, as one JSON value: PostgreSQL's and
# SQLite's limit for one value is 1 GB, and one run past it would fail the claim of every
# run of its workflow. A run stops well before (see `execution.budget`).
DEFAULT_MAX_HISTORY = 256 * 1024 * 1024


def encode(
    value: Any, what: str, limit: int = DEFAULT_MAX_PAYLOAD, codec: Codec | None = None
) -> str:
    """JSON text of `value` as stored (sealed by `codec`, if any: see `sealing`);
    InvalidInput naming `what` if JSON cannot hold it, PayloadTooLarge if what is stored
    is over `limit`."""
    try:
        data = pydantic_core.to_json(value)
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidInput(f"{what} is not JSON-serializable: {exc}") from None
    if codec is None and len(data) > limit:
        raise PayloadTooLarge(
            f"{what} is {len(data)} bytes of JSON, over the limit of {limit} "
            "(Durably(max_payload_bytes=...) sets it)"
        )
    # A search of the bytes costs next to nothing; only a text that may hold one is read to
    # be sure. pydantic writes NaN, ±Infinity and ints bare, where a value starts: matching
    # only there keeps "NaN" or digits inside a string (base64, prose) off the slow path.
    if _BARE.search(data) or b"\\u0000" in data:
        _refuse_unholdable(data, what)
    if looks_sealed(data):
        raise InvalidInput(f"{what} holds a string of the form {MARKER!r}TAG:TOKEN, "
                           "which durably keeps for encrypted values")  # fmt: skip
    if codec is None:
        return data.decode()
    stored = seal(data.decode(), codec)
    if len(stored) > limit:
        raise PayloadTooLarge(
            f"{what} is {len(stored)} bytes as stored, encrypted ({len(data)} bytes of "
            f"JSON), over the limit of {limit} (Durably(max_payload_bytes=...) sets it; "
            "the limit applies to what is stored)"
        )
    return stored


def decode(text: str | None) -> Any:
    """The value of JSON text (None stays None): text read from the store is opened there
    (see `store.sealed`); text just sealed here carries its plain form."""
    if text is None:
        return None
    return json.loads(getattr(text, "plain", text))


def parse(text: str, what: str) -> Any:
    """The value of JSON text a user typed (CLI, dashboard); InvalidInput naming `what` if
    it is not JSON, or holds what JSON cannot (Python's reader takes NaN and Infinity)."""
    try:
        value = json.loads(text, parse_constant=_constant, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # ours, or the reader's own (a number it cannot convert)
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:  # Python's reader recurses per level: a few thousand end it
        raise InvalidInput(f"{what} is nested too deeply to be read: flatten it") from None
    if _holds_nul(value):
        raise InvalidInput(f"{what} {_NUL}")
    return value


def canonical(value: Any) -> str:
    """One text for equal JSON values, whatever the order of their keys: how inputs are
    compared (an idempotent start). `true` and `1`, `1` and `1.0` stay apart."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_NUL = ("holds a NUL character (U+0000), which PostgreSQL cannot store, so no backend "
        "takes it: remove it, or store such text encoded (base64)")  # fmt: skip


class _Unholdable(ValueError):
    pass


def _constant(token: str) -> Any:
    raise _Unholdable(f"{token} has no JSON form (JSON has no NaN or ±Infinity): "
                      "use None or a string instead")  # fmt: skip


def _int(token: str) -> int:
    digits = len(token.lstrip("-"))
    if digits > INT_DIGITS:  # whatever this process allows: the reader may be another
        raise _Unholdable(f"it holds an integer of {digits} digits, and JSON readers take "
                          f"at most {INT_DIGITS}: store it as a string")  # fmt: skip
    return int(token)


def _refuse_unholdable(data: bytes, what: str) -> None:
    try:
        value = json.loads(data, parse_constant=_constant, parse_int=_int)
    except _Unholdable as exc:
        raise InvalidInput(f"{what} is not JSON: {exc}") from None
    if _holds_nul(value):
        raise InvalidInput(f"{what} {_NUL}")


def _holds_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


@functools.lru_cache(maxsize=512)
def adapter(annotation: Any) -> TypeAdapter[Any]:
    """A cached validator for a type annotation."""
    return TypeAdapter(annotation)


def validate(annotation: Any, value: Any, what: str) -> Any:
    """`value` (plain JSON) as `annotation`; InvalidInput naming `what` if it does not fit."""
    if annotation is Any:
        return value
    try:
        return adapter(annotation).validate_python(value)
    except ValidationError as exc:
        raise InvalidInput(f"{what} is invalid: {_summary(exc)}") from None


def _summary(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "value"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
