"""Runs a thin client started by name (`store.records.NEWEST`): which of them a worker
serves, and what its claim writes on them.

A worker serves a name's version-less runs when the newest version of that name it
registers (the last registered, as `app.get_workflow(name)` picks) is unqueued: its claim
binds that version and its retry policy's `max_attempts`, in the claim's own write. A
queued one is left out: the run has no queue until bound, so its first claim would bypass
the queue's limits. Such runs stay `pending`, and `durably runs --stuck` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..store.records import NEWEST
from ..workflow.definition import Definition


class Served(NamedTuple):
    """A `(workflow, version)` the worker claims, and what its claim binds on a run a
    thin client started: the version to run and its `max_attempts`."""

    workflow: str
    version: str
    binds: str
    max_attempts: int


def served(workflows: Mapping[tuple[str, str], Definition[Any, Any]]) -> list[Served]:
    """The pairs the worker registers, then `(name, NEWEST)` for each name whose newest
    version is unqueued."""
    newest: dict[str, Definition[Any, Any]] = {}
    out: list[Served] = []
    for wf in workflows.values():
        newest[wf.name] = wf
        out.append(Served(wf.name, wf.version, wf.version, wf.retry.max_attempts))
    for name, wf in newest.items():
        if wf.queue is None:
            out.append(Served(name, NEWEST, wf.version, wf.retry.max_attempts))
    return out
