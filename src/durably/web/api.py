"""The routes of the HTTP API (SPEC §4.25), under `/api/v1`, each the twin of a CLI
command: the same filters, the same checks before anything is written, the same JSON
documents (`client.documents`) and the same error messages (`errors`).

Every route goes through the app's public client API (`Durably`), as the CLI does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..client import documents
from ..client.durably import Durably
from ..core.attributes import matches, parse_attributes
from ..core.codec import parse
from ..core.durations import parse_duration
from ..core.errors import RequestRejected, RunNotFound, WorkflowTimeoutError
from ..store.models import STATUSES, Run
from .errors import BadRequest, Document, refusal

_TRUE, _FALSE = ("", "1", "true", "yes"), ("0", "false", "no")
_ENVELOPE = 64 * 1024  # a body's room beyond its payload: the other fields
_START = ("workflow", "input", "version", "idempotency_key", "available_at", "deadline_at",
          "concurrency_key", "priority", "attributes", "debounce", "debounce_key",
          "debounce_max")  # fmt: skip
_SIGNAL = ("name", "data", "idempotency_key", "run", "expires")
_REQUEST = ("name", "data", "timeout", "idempotency_key")
_RUNS = ("status", "workflow", "queue", "key", "stuck", "limit", "offset", "attr")
_REPEATABLE = ("attr",)  # `?attr=customer=c-1&attr=amount=30`: all must match


class Api:
    """The API's routes, answering for `durably` (its methods are the endpoints)."""

    def __init__(self, durably: Durably) -> None:
        self.durably = durably
        # A payload's JSON may be written with escapes (`\ud83d\ude00` for 4 bytes): a
        # body three times the payload limit still holds the largest payload there is.
        self.max_body = 3 * durably.max_payload + _ENVELOPE

    def routes(self) -> list[BaseRoute]:
        """The routes, relative to the API's root (`/api/v1`)."""
        return [
            Route("/runs", self.list_runs, methods=["GET"]),
            Route("/runs", self.start, methods=["POST"]),
            Route("/runs/{run_id}", self.get_run, methods=["GET"]),
            Route("/runs/{run_id}/cancel", self.cancel, methods=["POST"]),
            Route("/runs/{run_id}/resume", self.resume, methods=["POST"]),
            Route("/runs/{run_id}/events/{key:path}", self.get_event, methods=["GET"]),
            Route("/signals", self.send_signal, methods=["POST"]),
            Route("/runs/{run_id}/streams/{key:path}", self.read_stream, methods=["GET"]),
            Route("/runs/{run_id}/requests", self.request, methods=["POST"]),
        ]

    # ------------------------------------------------------------------ runs

    async def list_runs(self, request: Request) -> Response:
        """`durably runs`: newest first; `?status=&workflow=&queue=&key=&stuck&limit=` and
        `attr=KEY=VALUE`, repeatable (as `durably runs --attr`)."""
        query = _query(request, _RUNS)
        attributes = parse_attributes(request.query_params.getlist("attr"))
        status = query.get("status")
        if status is not None and status not in STATUSES:
            raise BadRequest(f"status must be one of {', '.join(STATUSES)}")
        limit = _whole(query, "limit", 100, least=1)
        offset = _whole(query, "offset", 0, least=0)
        workflow, queue, key = query.get("workflow"), query.get("queue"), query.get("key")
        if _flag(query, "stuck"):
            if "offset" in query:
                raise BadRequest("offset does not apply to stuck runs (the stuck are few)")
            found = [r for r in await self.durably.list_stuck(limit)
                     if status in (None, r.status) and workflow in (None, r.workflow)
                     and queue in (None, r.queue) and key in (None, r.idempotency_key)
                     and matches(r.attributes, attributes or {})]  # fmt: skip
        else:
            found = await self.durably.list_runs(
                status=status, workflow=workflow, limit=limit, offset=offset, queue=queue,
                idempotency_key=key, attributes=attributes,
            )  # fmt: skip
        return Document(documents.runs(found))

    async def start(self, request: Request) -> Response:
        """`durably start`: 201 and `{"run_id", "status", "version"}` for a new run; 200
        for the run an idempotency key started before with an equal input, or the pending
        run of the window a debounced start joined."""
        body = await self._body(request, _START, "a start")
        workflow = _name(body, "workflow")
        priority = body.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise BadRequest(f"priority must be a whole number, not {_shown(priority)}")
        key = _text(body, "idempotency_key")
        existed = key is not None and await self._started(workflow, key)
        handle = await self.durably.start(
            workflow, body.get("input"), version=_text(body, "version"), idempotency_key=key,
            available_at=_text(body, "available_at"), deadline_at=_text(body, "deadline_at"),
            concurrency_key=_text(body, "concurrency_key"), priority=priority,
            debounce=_text(body, "debounce"), debounce_key=_text(body, "debounce_key"),
            debounce_max=_text(body, "debounce_max"),
            attributes=body.get("attributes"),
        )  # fmt: skip
        run = handle.run or await handle.get()
        if existed or handle.joined:
            return Document(documents.started(run))
        location = {"Location": f"{request.url.path}/{run.run_id}"}
        return Document(documents.started(run), 201, location)

    async def _started(self, workflow: str, key: str) -> bool:
        """Whether this app's namespace has a run of `workflow` started with `key`.
        (Two starts racing with a new key may both answer 201: they name one run.)"""
        try:
            await self.durably.run_handle(idempotency_key=key, workflow=workflow)
        except RunNotFound:
            return False
        return True

    async def get_run(self, request: Request) -> Response:
        """The run JSON."""
        return Document(documents.run(await self.durably.get_run(_run_id(request))))

    async def cancel(self, request: Request) -> Response:
        """`durably cancel`: the run, canceled (409 if it had already finished)."""
        return await self._act(request, self.durably.cancel)

    async def resume(self, request: Request) -> Response:
        """`durably resume`: the run, pending again (400 unless it failed or was canceled)."""
        return await self._act(request, self.durably.resume)

    async def _act(self, request: Request, action: Callable[[str], Awaitable[Run]]) -> Response:
        await self._body(request, (), "this action", optional=True)  # none, or {}
        return Document(documents.run(await action(_run_id(request))))

    async def get_event(self, request: Request) -> Response:
        """`app.get_event`: `{"run_id", "key", "value"}`, the latest value the run set
        for `key`; `?timeout=30s` waits that long for a first one. 404 if there is none."""
        run_id, key = _run_id(request), str(request.path_params["key"])
        timeout = _query(request, ("timeout",)).get("timeout")
        if timeout is not None:
            parse_duration(timeout)  # a 400 before any wait
        await self.durably.get_run(run_id)  # a 404 for a run that does not exist
        if timeout is not None:
            await self.durably.get_event(run_id, key, timeout)
        events = await self.durably.list_events(run_id)  # a set null is a value, too
        if key not in events:
            within = f" within {timeout}" if timeout is not None else ""
            return refusal(404, f"run {run_id} has set no event {key!r}{within}")
        return Document({"run_id": run_id, "key": key, "value": events[key]})

    async def read_stream(self, request: Request) -> Response:
        """`durably stream`: the run's stream as server-sent events from `?from=N` (or
        after a reconnecting client's `Last-Event-ID`), one `data:` JSON value each with
        its offset as `id:`, until the stream is closed: then an `end` event."""
        run_id, key = _run_id(request), str(request.path_params["key"])
        offset = _whole(_query(request, ("from",)), "from", 0, least=0)
        last = request.headers.get("last-event-id", "")
        if last.isascii() and last.isdigit():
            offset = int(last) + 1
        await self.durably.get_run(run_id)  # a 404 before the stream starts
        return StreamingResponse(
            _events(self.durably.read_stream(run_id, key, offset), offset),
            media_type="text/event-stream", headers={"Cache-Control": "no-store"},
        )  # fmt: skip

    # ------------------------------------------------------------------ signals

    async def send_signal(self, request: Request) -> Response:
        """`durably signal`: the §4.3 result `{"delivered_to", "buffered", "duplicate"}`."""
        body = await self._body(request, _SIGNAL, "a signal")
        name = _name(body, "name")
        result = await self.durably.send_signal(
            name, body.get("data"), idempotency_key=_text(body, "idempotency_key"),
            run_id=_text(body, "run"), expires=_text(body, "expires"),
        )  # fmt: skip
        return Document(result)

    # ------------------------------------------------------------------ requests

    async def request(self, request: Request) -> Response:
        """`durably request`: `{"request_id", "answer"}` once the run answered. A rejection
        is a 422 `{"error", "reason", "request_id"}`; no answer within `timeout` (default
        30s) a 504 with the `request_id` (the request stays pending: ask again with the
        same `idempotency_key` for its answer)."""
        body = await self._body(request, _REQUEST, "a request")
        timeout = _text(body, "timeout") or "30s"
        parse_duration(timeout)  # a 400 before anything is sent
        request_id = await self.durably.send_request(
            _run_id(request), _name(body, "name"), body.get("data"),
            idempotency_key=_text(body, "idempotency_key"),
        )  # fmt: skip
        try:
            answer = await self.durably.get_reply(request_id, timeout)
        except RequestRejected as exc:
            return Document({**documents.error(f"rejected: {exc.reason}"),
                             "reason": exc.reason, "request_id": request_id}, 422)  # fmt: skip
        except WorkflowTimeoutError as exc:
            return Document({**documents.error(str(exc)), "request_id": request_id}, 504)
        return Document({"request_id": request_id, "answer": answer})

    # ------------------------------------------------------------------ bodies

    async def _body(self, request: Request, fields: tuple[str, ...], what: str,
                    optional: bool = False) -> dict[str, Any]:  # fmt: skip
        """The request's JSON object, holding no field but `fields` (BadRequest or
        InvalidInput, a 400, before anything is written)."""
        text = await self._text_of(request)
        if not text.strip():
            if optional:
                return {}
            raise BadRequest(f"{what} needs a JSON object as its body (fields: "
                             f"{', '.join(fields)})")  # fmt: skip
        body = parse(text, "the request body")  # NaN, Infinity and NUL refused here
        if not isinstance(body, dict):
            raise BadRequest(f"the request body must be a JSON object, not {_shown(body)}")
        unknown = sorted(set(body) - set(fields))
        if unknown:
            takes = f"its fields are {', '.join(fields)}" if fields else "it takes none"
            raise BadRequest(f"{what} has no field {', '.join(map(repr, unknown))}: {takes}")
        return body

    async def _text_of(self, request: Request) -> str:
        too_large = (f"the request body is over {self.max_body} bytes (the payload limit "
                     f"is {self.durably.max_payload}: Durably(max_payload_bytes=...) sets "
                     "it)")  # fmt: skip
        length = request.headers.get("content-length", "")
        if length.isascii() and length.isdigit() and int(length) > self.max_body:
            raise BadRequest(too_large)
        data = bytearray()
        async for chunk in request.stream():  # read no further than the limit
            data += chunk
            if len(data) > self.max_body:
                raise BadRequest(too_large)
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise BadRequest("the request body is not UTF-8 text") from None


async def _events(values: AsyncIterator[Any], offset: int) -> AsyncIterator[str]:
    async for value in values:
        yield f"id: {offset}\ndata: {documents.text(value)}\n\n"
        offset += 1
    yield "event: end\ndata: null\n\n"


def _run_id(request: Request) -> str:
    return str(request.path_params["run_id"])


def _shown(value: Any) -> str:
    """How a wrong value is named in a message: its JSON type."""
    if value == "":
        return "an empty string"
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "an object", type(None): "null"}  # fmt: skip
    return kinds.get(type(value), type(value).__name__)


def _text(body: dict[str, Any], field: str) -> str | None:
    """An optional text field (null: not given)."""
    return None if body.get(field) is None else _name(body, field)


def _name(body: dict[str, Any], field: str) -> str:
    """A field that must be given, as a non-empty string."""
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{field} must be a non-empty string, not {_shown(value)}")
    return value


def _query(request: Request, names: tuple[str, ...]) -> dict[str, str]:
    """The query's parameters, each once, none but `names` (a typo is an error, not a
    filter silently left out)."""
    params = request.query_params
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise BadRequest(f"no query parameter {', '.join(map(repr, unknown))} here: the "
                         f"parameters are {', '.join(names)}")  # fmt: skip
    twice = sorted(k for k in set(params) - set(_REPEATABLE) if len(params.getlist(k)) > 1)
    if twice:
        raise BadRequest(f"query parameter {', '.join(map(repr, twice))} given more than once")
    return dict(params)


def _whole(query: dict[str, str], name: str, default: int, least: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) < least:
        raise BadRequest(f"{name} must be a whole number of at least {least}, not {raw!r}")
    return int(raw)


def _flag(query: dict[str, str], name: str) -> bool:
    raw = query.get(name)
    if raw is None:
        return False
    if raw.lower() not in _TRUE + _FALSE:
        raise BadRequest(f"{name} is true or false, not {raw!r}")
    return raw.lower() in _TRUE
