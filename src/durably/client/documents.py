"""The JSON documents of SPEC §5: what `durably COMMAND --json` prints, and what the HTTP
API (`durably serve`, §4.25) answers, built in one place so the two cannot drift apart."""

from __future__ import annotations

import json
import re
from typing import Any

from ..store.models import Run, StepAttempt


def run(r: Run) -> dict[str, Any]:
    """The run JSON (`cancel`, `resume`, `fork`; each item of `runs`)."""
    return r.to_dict()


def runs(found: list[Run]) -> list[dict[str, Any]]:
    """`runs`: a list of runs."""
    return [r.to_dict() for r in found]


def started(r: Run) -> dict[str, Any]:
    """`start`: `{"run_id", "status", "version"}`."""
    return {"run_id": r.run_id, "status": r.status, "version": r.version}


def shown(r: Run, steps: list[StepAttempt], events: dict[str, Any]) -> dict[str, Any]:
    """`show`: `{"run": RUN, "steps": [STEP, ...], "events": {key: latest value}}`."""
    return {"run": r.to_dict(), "steps": [s.to_dict() for s in steps], "events": events}


def error(message: str) -> dict[str, Any]:
    """An error: `{"error": MESSAGE}`, the message on one line (a driver's may span
    several)."""
    return {"error": re.sub(r"\s*\n\s*", " ", message.strip())}


def text(doc: Any, indent: int | None = None) -> str:
    """`doc` as JSON text (a value JSON has no type for, such as a time, as its `str`)."""
    return json.dumps(doc, indent=indent, default=str)
