"""How answers are written: a §5 document as JSON, and every error as `{"error": MESSAGE}`
with the message the CLI prints and the status that says what the caller can do.

    400  bad input: not JSON, a value JSON cannot hold, input the workflow refuses, a
         payload over the limit, an unknown field or parameter (`InvalidInput`,
         `ConfigurationError`, `BadRequest`); nothing was written
    401  no token, or a wrong one (`guard`)
    404  no such run, workflow or signal; no such route
    405  a route that does not take this method
    409  the idempotency key started a run with another input; the run has finished
    422  the workflow rejected a request (`RequestRejected`: `{"error", "reason", "request_id"}`)
    421  a `Host` this server does not answer to (`guard`)
    503  the database could not be reached
    504  the wait ran out before the value could be read (a request's answer: with its
         `request_id`; the request stays pending)
    500  anything else (its traceback is in the server's log, not in the answer)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..client import documents
from ..core.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    DurablyError,
    IdempotencyConflictError,
    InvalidInput,
    RunNotFound,
    RunTerminalError,
    SignalNotFound,
    WorkflowNotFound,
    WorkflowTimeoutError,
)

log = logging.getLogger("durably.web")

# Most specific first: InvalidDuration is a ConfigurationError and an InvalidInput.
_STATUS: tuple[tuple[type[DurablyError], int], ...] = (
    (InvalidInput, 400),
    (ConfigurationError, 400),
    (WorkflowNotFound, 404),
    (RunNotFound, 404),
    (SignalNotFound, 404),
    (IdempotencyConflictError, 409),
    (RunTerminalError, 409),
    (DatabaseUnavailable, 503),
    (WorkflowTimeoutError, 504),
)


class BadRequest(Exception):
    """A request the API cannot take as it is (a field or a parameter): a 400, and its
    message says what to send instead. Nothing was written."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Document(Response):
    """A JSON document, written as the CLI's `--json` writes it (`documents.text`)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return documents.text(content).encode()


def refusal(status: int, message: str, headers: Mapping[str, str] | None = None) -> Document:
    """The answer `{"error": message}` with `status`."""
    return Document(documents.error(message), status, headers)


def status_of(exc: DurablyError) -> int:
    """The HTTP status of one of the engine's errors (500: not the caller's to fix)."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


async def _engine_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DurablyError)
    status = status_of(exc)
    if status == 500:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return refusal(status, str(exc))


async def _bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    return refusal(400, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path} (the routes are listed by "
        message += "GET /api/v1/openapi.json)"
    elif exc.status_code == 405:
        message = f"{request.url.path} does not take {request.method}"
    else:
        message = str(exc.detail)
    return refusal(exc.status_code, message, exc.headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    # Starlette raises it again once this answer is sent: the server logs its traceback.
    return refusal(500, "internal error; see the server's log")


HANDLERS: Mapping[Any, Any] = {
    DurablyError: _engine_error,
    BadRequest: _bad_request,
    HTTPException: _http_error,
    Exception: _unexpected,
}
