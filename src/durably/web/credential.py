"""The token that every call of the HTTP API presents, and that logs in to the dashboard:
given (`--token`, `DURABLY_DASHBOARD_TOKEN`) or made at start and printed."""

from __future__ import annotations

import hmac
import secrets

ENV = "DURABLY_DASHBOARD_TOKEN"


def new_token(given: str | None = None) -> str:
    """`given`, or (None or empty) a new random one."""
    return given or secrets.token_urlsafe(24)


def same_token(presented: str | bytes | None, token: str) -> bool:
    """Whether `presented` (text, or a header's raw bytes) is `token`, in a time that does
    not depend on where they differ. Compared as UTF-8 bytes: `hmac.compare_digest`
    refuses `str` with characters beyond ASCII, which a header or a form may hold."""
    if presented is None:
        return False
    if isinstance(presented, str):
        presented = presented.encode()
    return hmac.compare_digest(presented, token.encode())
