"""Search attributes (SPEC §4.24): a run's small, flat, indexed key-value labels, given at
start (`wf.start(input, attributes={...})`), merged in by its code
(`ctx.step.set_attributes({...})`) and matched by `app.list_runs(attributes={...})`.

What an attribute can be is checked here, once, for every way in (start, the workflow,
a filter, the CLI, the HTTP API; the SQL function `start_run` checks the same in
PostgreSQL): keys are non-empty strings of at most `MAX_KEY_LENGTH` characters; values are
JSON scalars (str of at most `MAX_STRING_LENGTH` characters, int within 64 bits, finite
float, bool), never null, a list or an object; at most `MAX_ATTRIBUTES` keys in one call.
A filter matches a run whose attributes hold every key with an equal value: numbers by
value (30 matches 30.0), a bool only a bool, a string only a string.

Attributes are stored as given, in plain JSON, and never encrypted, whatever codec the app
has: they are what an operator searches by. Keep secrets out of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import InvalidInput

MAX_KEY_LENGTH = 128
MAX_STRING_LENGTH = 1024
MAX_ATTRIBUTES = 64
_INT64 = 1 << 63

Attributes = Mapping[str, str | int | float | bool]


def check_attributes(attributes: Any, what: str = "attributes") -> dict[str, Any]:
    """`attributes` as a plain dict, or InvalidInput saying what does not fit (nothing is
    written by a call that raises)."""
    if not isinstance(attributes, Mapping):
        raise InvalidInput(
            f"{what} must be a mapping of names to values, not {type(attributes).__name__}"
        )
    if len(attributes) > MAX_ATTRIBUTES:
        raise InvalidInput(f"{what} holds {len(attributes)} keys; at most {MAX_ATTRIBUTES} at once")
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
            raise InvalidInput(
                f"{what}: a key must be a non-empty string of at most {MAX_KEY_LENGTH} "
                f"characters, not {key!r:.80}"
            )
        out[key] = _scalar(value, f"{what}: the value of {key!r}")
    return out


def _scalar(value: Any, what: str) -> Any:
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise InvalidInput(f"{what} is an int beyond 64 bits; store it as a string")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{what} is {value!r}, which JSON cannot hold")
        return float(value)
    if isinstance(value, str):
        if len(value) > MAX_STRING_LENGTH or "\x00" in value:
            raise InvalidInput(
                f"{what} is a string of more than {MAX_STRING_LENGTH} characters or with "
                "U+0000; an attribute is a short label"
            )
        return str(value)
    raise InvalidInput(
        f"{what} is {type(value).__name__}: an attribute is a str, int, float or bool"
    )


def encode_attributes(attributes: Any, what: str = "attributes") -> str | None:
    """The JSON text to store for `attributes` (None for none or an empty mapping)."""
    if attributes is None:
        return None
    checked = check_attributes(attributes, what)
    return json.dumps(checked, separators=(",", ":"), ensure_ascii=False) if checked else None


def matches(attributes: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether `attributes` hold every key of `wanted` with an equal value, as the
    database's match compares them (numbers by value, a bool only equal to a bool)."""
    for key, value in wanted.items():
        have = attributes.get(key, _MISSING)
        if have is _MISSING or isinstance(have, bool) != isinstance(value, bool):
            return False
        if isinstance(have, str) != isinstance(value, str) or have != value:
            return False
    return True


_MISSING = object()


def parse_attributes(texts: list[str] | None) -> dict[str, Any] | None:
    """Repeated `KEY=VALUE` (`durably runs --attr`, `GET /api/v1/runs?attr=`) as checked
    attributes (None for none); InvalidInput for a bad one."""
    if not texts:
        return None
    return check_attributes(dict(parse_attribute(t) for t in texts), "--attr")


def parse_attribute(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` as the CLI and the HTTP API take it: the value is read as JSON when it
    parses (`amount=30`, `vip=true`, `name="30"`), else taken as the text it is
    (`customer=c-1`); JSON that is no attribute value (null, a list) is refused later, by
    `check_attributes`."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise InvalidInput(f"an attribute is KEY=VALUE, not {text!r}")
    try:
        value: Any = json.loads(raw, parse_constant=_not_json)
    except ValueError:
        value = raw
    return key, value


def _not_json(constant: str) -> Any:
    raise ValueError(constant)  # NaN and Infinity, which Python's reader takes: text
