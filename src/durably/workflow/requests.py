"""What workflow code sees of requests (SPEC §4.22): a `Request` taken by
`ctx.step.wait_for_request`, and the `Reply` command that answers it once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """A request a client sent the run (`app.request`), taken by
    `ctx.step.wait_for_request`; answer it with `ctx.step.reply(req, value)` or
    `ctx.step.reject(req, reason)`.

    Attributes:
        id: the request's id (the client's `app.get_reply(id)` reads its answer).
        name: the name it was sent to.
        data: its data, as JSON decodes it.
    """

    id: str
    name: str
    data: Any = None


@dataclass(frozen=True)
class Reply:
    """The answer to request `request_id`: `answered` with `answer_json`, or `rejected`."""

    request_id: str
    status: str
    answer_json: str | None
    reason: str | None
