"""A workflow as registered: its function, `(name, version)`, retry policy, queue and
schedule, and how its input and output are typed. No I/O here: the client's `Workflow`
(`client.workflow`) is a definition bound to an app, which starts runs."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from ..core.attributes import encode_attributes
from ..core.codec import adapter, encode, validate
from ..core.durations import Duration, parse_instant
from ..core.errors import InvalidInput
from ..core.retry import RetryPolicy
from ..core.sealing import Codec
from ..store.records import NewRun
from .debounce import debounce_of
from .queue import Queue, check_unqueued
from .schedule import Schedule
from .syncflow import is_sync_workflow

WorkflowFn = Callable[..., Any]  # async, or a plain `def` (a sync workflow)

In = TypeVar("In", contravariant=True)
Out = TypeVar("Out", covariant=True)


class Definition(Generic[In, Out]):
    """A registered workflow's definition: `(name, version)`, its function (async, or
    sync), retry policy, queue, schedule and the types of its input and output."""

    def __init__(
        self, fn: WorkflowFn, name: str, version: str, retry: RetryPolicy,
        queue: Queue | None = None, schedule: Schedule | None = None,
    ) -> None:  # fmt: skip
        self.sync = is_sync_workflow(fn)  # a plain `def`: see `syncflow`
        self.fn = fn
        self.name = name
        self.version = version
        self.retry = retry
        self.queue = queue
        self.schedule = schedule
        params = list(inspect.signature(fn).parameters.values())
        self.takes_input = len(params) >= 2
        hints = typing.get_type_hints(fn) if self.takes_input else {}
        self.input_type: Any = hints.get(params[1].name, Any) if self.takes_input else Any
        self.output_type: Any = _return_type(fn)

    def __repr__(self) -> str:
        return f"<Workflow {self.name}@{self.version}>"

    def parse_input(self, value: Any) -> Any:
        """Stored (or given) input as the function's declared input type."""
        return validate(self.input_type, value, f"input of workflow {self.name!r}")

    def new_run(
        self,
        input: Any,
        *,
        max_payload: int,
        codec: Codec | None = None,
        now: datetime | None = None,
        idempotency_key: str | None = None,
        available_at: datetime | str | None = None,
        deadline_at: datetime | str | None = None,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        parent_close: str = "cancel",
        concurrency_key: str | None = None,
        priority: int = 0,
        debounce: Duration | None = None,
        debounce_key: str | None = None,
        debounce_max: Duration | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> NewRun:
        """Validate and encode a start request (nothing is written); "+5s" counts from `now`."""
        window = debounce_of(
            debounce, debounce_key, debounce_max, idempotency_key=idempotency_key,
            available_at=available_at,
        )  # fmt: skip
        if self.queue is not None:
            self.queue.check_start(self.name, concurrency_key, priority)
        else:
            check_unqueued(self.name, concurrency_key, priority)
        if self.takes_input:
            value = self.parse_input(input)
        elif input is not None:
            raise InvalidInput(f"workflow {self.name!r} takes no input")
        else:
            value = None
        attributes_json = encode_attributes(attributes, f"attributes of workflow {self.name!r}")
        return NewRun(
            workflow=self.name,
            version=self.version,
            input_json=encode(value, f"input of workflow {self.name!r}", max_payload, codec),
            max_attempts=self.retry.max_attempts,
            idempotency_key=idempotency_key,
            available_at=_instant(available_at, now),
            deadline_at=_instant(deadline_at, now),
            parent_run_id=parent_run_id,
            run_id=run_id,
            parent_close=parent_close,
            queue=self.queue.name if self.queue is not None else None,
            concurrency_key=concurrency_key,
            priority=priority,
            debounce=window,
            per_key=self.queue.per_key if self.queue is not None else None,
            on_full=self.queue.on_full if self.queue is not None else "wait",
            attributes_json=attributes_json,
        )


def _instant(value: datetime | str | None, now: datetime | None) -> datetime | None:
    if value is None:
        return None
    return parse_instant(value, now)


def _return_type(fn: Callable[..., Any]) -> Any:
    """The return annotation to validate a stored result into; Any (plain JSON) when
    there is none or pydantic cannot validate it (e.g. `typing.TypedDict` before
    Python 3.12, whose values are plain dicts anyway)."""
    try:
        ret: Any = typing.get_type_hints(fn).get("return", Any)
        ret = type(None) if ret is None else ret
        adapter(ret)
    except Exception:
        return Any
    return ret
