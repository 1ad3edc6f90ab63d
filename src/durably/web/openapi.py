"""The API's OpenAPI 3.1 document (`GET /api/v1/openapi.json`), written by hand: what a
client in another language generates its code from. A test checks that it lists every
route `api.Api` serves, with the methods it takes."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .errors import Document

_JSON = "application/json"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _answer(description, _ref("Error"))


def _body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {_JSON: {"schema": _ref(name)}}}


_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
_COMMON = {"401": _error("no token, or a wrong one"),
           "421": _error("a Host this server does not answer to")}  # fmt: skip
_NOT_FOUND = _error("no such run")
_BAD = _error("bad input (nothing was written)")
_TEXT = {"type": ["string", "null"]}
_WHEN = {"type": ["string", "null"], "description": "ISO time, or +5s from now"}
_ATTRIBUTES = {
    "type": "object",
    "maxProperties": 64,
    "propertyNames": {"minLength": 1, "maxLength": 128},
    "additionalProperties": {"type": ["string", "integer", "number", "boolean"]},
    "description": "search attributes (SPEC §4.24): flat labels to find runs by; stored in "
    "plain text, never encrypted. Only where the run has any.",
}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}  # fmt: skip


_RUNS_QUERY = [
    _query("status", {"type": "string", "enum": ["pending", "running", "waiting", "held",
                                                 "continued", "completed", "failed", "canceled"]},
           "runs with this status"),
    _query("workflow", {"type": "string"}, "runs of this workflow"),
    _query("queue", {"type": "string"}, "runs of this queue"),
    _query("key", {"type": "string"}, "the run started with this idempotency key"),
    _query("stuck", {"type": "boolean"}, "due runs nothing is taking, and held runs"),
    _query("limit", {"type": "integer", "minimum": 1, "default": 100}, "at most this many"),
    _query("offset", {"type": "integer", "minimum": 0, "default": 0}, "skip this many"),
    {**_query("attr", {"type": "array", "items": {"type": "string"}},
              "runs whose search attribute KEY equals VALUE, as KEY=VALUE (VALUE read as JSON "
              "if it parses, else as text); repeatable, all must match"),
     "style": "form", "explode": True},
]  # fmt: skip

_PATHS: dict[str, Any] = {
    "/api/v1/runs": {
        "get": {"summary": "List runs, newest first (durably runs)", "operationId": "listRuns",
                "parameters": _RUNS_QUERY,
                "responses": {"200": _answer("the runs", {"type": "array", "items": _ref("Run")}),
                              "400": _BAD, **_COMMON}},
        "post": {"summary": "Start a run (durably start)", "operationId": "startRun",
                 "requestBody": _body("StartRequest"),
                 "responses": {"201": _answer("a new run", _ref("Started")),
                               "200": _answer("the run this idempotency key started before",
                                              _ref("Started")),
                               "400": _BAD, "404": _error("no such workflow or version"),
                               "409": _error("the key started a run with another input"),
                               **_COMMON}},
    },
    "/api/v1/runs/{run_id}": {
        "get": {"summary": "A run", "operationId": "getRun", "parameters": [_RUN_ID],
                "responses": {"200": _answer("the run", _ref("Run")), "404": _NOT_FOUND,
                              **_COMMON}},
    },
    "/api/v1/runs/{run_id}/cancel": {
        "post": {"summary": "Cancel a run and its children (durably cancel)",
                 "operationId": "cancelRun", "parameters": [_RUN_ID],
                 "responses": {"200": _answer("the run", _ref("Run")), "404": _NOT_FOUND,
                               "409": _error("the run has already finished"), **_COMMON}},
    },
    "/api/v1/runs/{run_id}/resume": {
        "post": {"summary": "Continue a failed or canceled run (durably resume)",
                 "operationId": "resumeRun", "parameters": [_RUN_ID],
                 "responses": {"200": _answer("the run", _ref("Run")),
                               "400": _error("the run is neither failed nor canceled"),
                               "404": _NOT_FOUND, **_COMMON}},
    },
    "/api/v1/runs/{run_id}/events/{key}": {
        "get": {"summary": "The latest value a run set for an event",
                "operationId": "getEvent",
                "parameters": [_RUN_ID,
                               {"name": "key", "in": "path", "required": True,
                                "schema": {"type": "string"}},
                               _query("timeout", {"type": "string"},
                                      "wait this long (30s) for a first value")],
                "responses": {"200": _answer("the value", _ref("Event")), "400": _BAD,
                              "404": _error("no such run, or it has set no such event"),
                              **_COMMON}},
    },
    "/api/v1/runs/{run_id}/streams/{key}": {
        "get": {"summary": "Follow a run's stream, as server-sent events (durably stream)",
                "operationId": "readStream",
                "parameters": [_RUN_ID,
                               {"name": "key", "in": "path", "required": True,
                                "schema": {"type": "string"}},
                               _query("from", {"type": "integer", "minimum": 0},
                                      "the offset to start at (default 0; a Last-Event-ID "
                                      "header starts after it)")],
                "responses": {"200": {"description": "one event per value (`id:` its "
                                                     "offset, `data:` its JSON), then an "
                                                     "`end` event once the stream is closed",
                                      "content": {"text/event-stream": {
                                          "schema": {"type": "string"}}}},
                              "400": _BAD, "404": _NOT_FOUND, **_COMMON}},
    },
    "/api/v1/signals": {
        "post": {"summary": "Send a durable signal (durably signal)",
                 "operationId": "sendSignal", "requestBody": _body("SignalRequest"),
                 "responses": {"200": _answer("what happened", _ref("SignalResult")),
                               "400": _BAD, "404": _error("no such run (run)"),
                               "409": _error("the run (run) has finished"), **_COMMON}},
    },
    "/api/v1/openapi.json": {
        "get": {"summary": "This document", "operationId": "openapi",
                "responses": {"200": {"description": "the OpenAPI document",
                                      "content": {_JSON: {}}}, **_COMMON}},
    },
    "/api/v1/runs/{run_id}/requests": {
        "post": {"summary": "Ask a running workflow and wait for its answer (durably request)",
                 "operationId": "sendRequest", "parameters": [_RUN_ID],
                 "requestBody": _body("RequestRequest"),
                 "responses": {"200": _answer("the answer", _ref("Reply")), "400": _BAD,
                               "404": _NOT_FOUND, "409": _error("the run has finished"),
                               "422": _answer("the workflow rejected it", _ref("Rejected")),
                               "504": _answer("no answer in time; the request stays pending",
                                              _ref("Rejected")),
                               **_COMMON}},
    },
}  # fmt: skip

_TIME = {"type": ["string", "null"], "format": "date-time"}
_SCHEMAS: dict[str, Any] = {
    "Run": {
        "type": "object",
        "description": "The run JSON of `durably cancel --json` and each item of "
                       "`durably runs --json`",
        "required": ["run_id", "workflow", "version", "status", "attempts", "input", "output",
                     "error", "fence", "worker_id", "available_at", "created_at",
                     "finished_at"],
        "properties": {
            "run_id": {"type": "string"}, "workflow": {"type": "string"},
            "version": {"type": "string"}, "status": {"type": "string"},
            "attempts": {"type": "integer"}, "input": {}, "output": {},
            "error": {"type": ["object", "null"]}, "fence": {"type": "integer"},
            "worker_id": _TEXT, "available_at": _TIME, "created_at": _TIME,
            "started_at": _TIME, "finished_at": _TIME, "idempotency_key": _TEXT,
            "deadline_at": _TIME, "wake_at": _TIME, "waiting_for": _TEXT,
            "parent_run_id": _TEXT, "queue": _TEXT, "priority": {"type": "integer"},
            "debounce_key": {"type": "string",
                             "description": "only on a run a debounced start made"},
            "attributes": _ATTRIBUTES,
        },
    },
    "Started": {
        "type": "object", "description": "The document of `durably start --json`",
        "required": ["run_id", "status", "version"],
        "properties": {"run_id": {"type": "string"}, "status": {"type": "string"},
                       "version": {"type": "string"}},
    },
    "StartRequest": {
        "type": "object", "required": ["workflow"], "additionalProperties": False,
        "properties": {
            "workflow": {"type": "string"}, "input": {"description": "the workflow's input"},
            "version": _TEXT, "idempotency_key": _TEXT, "available_at": _WHEN,
            "deadline_at": _WHEN, "concurrency_key": _TEXT, "priority": {"type": "integer"},
            "attributes": {**_ATTRIBUTES, "type": ["object", "null"]},
            "debounce": {"type": ["string", "null"], "description": "a duration, e.g. 5s: "
                         "join the pending run of debounce_key's window (answered 200)"},
            "debounce_key": _TEXT,
            "debounce_max": {"type": ["string", "null"], "description": "a duration: start "
                             "at most this long after the window's first start"},
        },
    },
    "SignalRequest": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": {"type": "string"}, "data": {}, "idempotency_key": _TEXT,
                       "run": {"type": ["string", "null"], "description": "one run's id"},
                       "expires": {"type": ["string", "null"],
                                   "description": "drop it unread after (1d)"}},
    },
    "SignalResult": {
        "type": "object", "required": ["delivered_to", "buffered", "duplicate"],
        "properties": {"delivered_to": {"type": "array", "items": {"type": "string"}},
                       "buffered": {"type": "boolean"}, "duplicate": {"type": "boolean"}},
    },
    "Event": {
        "type": "object", "required": ["run_id", "key", "value"],
        "properties": {"run_id": {"type": "string"}, "key": {"type": "string"}, "value": {}},
    },
    "RequestRequest": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": {"type": "string"}, "data": {}, "idempotency_key": _TEXT,
                       "timeout": {"type": ["string", "null"],
                                   "description": "how long to wait (default 30s)"}},
    },
    "Reply": {
        "type": "object", "required": ["request_id", "answer"],
        "properties": {"request_id": {"type": "string"}, "answer": {}},
    },
    "Rejected": {
        "type": "object", "required": ["error", "request_id"],
        "properties": {"error": {"type": "string"}, "request_id": {"type": "string"},
                       "reason": {"type": "string"}},
    },
    "Error": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "string", "description": "what the CLI prints"}},
    },
}  # fmt: skip

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "durably", "version": "v1",
             "description": "Start runs, send signals and read runs of a durably database "
                            "from any language (SPEC §4.25)."},
    "paths": _PATHS,
    "components": {"schemas": _SCHEMAS,
                   "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}}},
    "security": [{"token": []}],
}  # fmt: skip


async def openapi(request: Request) -> Response:
    """This document."""
    return Document(DOCUMENT)
