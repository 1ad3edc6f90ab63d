"""Payloads are JSON: anything pydantic can serialize goes in, plain JSON (or the declared
type, validated) comes out. The value a workflow sees is always the decoded stored form,
and the stored form is this text, kept as it is (PostgreSQL `json`, SQLite TEXT): a replay
sees exactly what the first execution saw, key order and every float included. Never pickle."""

from __future__ import annotations

import functools
import json
from typing import Any

import pydantic_core
from pydantic import TypeAdapter, ValidationError

from ._errors import InvalidInput, PayloadTooLarge

DEFAULT_MAX_PAYLOAD = 1024 * 1024


def encode(value: Any, what: str, limit: int = DEFAULT_MAX_PAYLOAD) -> str:
    """JSON text of `value`; InvalidInput naming `what` if it is not JSON-serializable."""
    try:
        data = pydantic_core.to_json(value)
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidInput(f"{what} is not JSON-serializable: {exc}") from None
    if len(data) > limit:
        raise PayloadTooLarge(
            f"{what} is {len(data)} bytes of JSON, over the limit of {limit} "
            "(Durably(max_payload_bytes=...) sets it)"
        )
    return data.decode()


def decode(text: str | None) -> Any:
    """The value of stored JSON text (None stays None)."""
    return None if text is None else json.loads(text)


def canonical(value: Any) -> str:
    """One text for equal JSON values, whatever the order of their keys: how inputs are
    compared (an idempotent start). `true` and `1`, `1` and `1.0` stay apart."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
