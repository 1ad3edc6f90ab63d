"""Workflow definitions (`workflow.definition`): types read from the function, and a start
request validated and encoded without any I/O."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from durably import InvalidInput, PayloadTooLarge, RetryPolicy, WorkflowContext
from durably.workflow.definition import Definition
from durably.workflow.queue import Queue

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Order(BaseModel):
    id: str
    qty: int = 1


async def ship(ctx: WorkflowContext, order: Order) -> list[int]:
    return [order.qty]


async def tick(ctx: WorkflowContext) -> None:
    return None


def sync_flow(ctx: Any, n: int) -> int:
    return n


def _define(fn: Any, queue: Queue | None = None) -> Definition[Any, Any]:
    return Definition(fn, fn.__name__, "v1", RetryPolicy(max_attempts=3), queue)


def test_types_are_read_from_the_function() -> None:
    wf = _define(ship)
    assert (wf.takes_input, wf.input_type, wf.output_type, wf.sync) == (
        True, Order, list[int], False,
    )  # fmt: skip
    none = _define(tick)
    assert (none.takes_input, none.output_type) == (False, type(None))
    assert _define(sync_flow).sync


def test_a_start_request_is_validated_and_encoded() -> None:
    new = _define(ship).new_run({"id": "o1"}, max_payload=1000, now=NOW, available_at="+5s")
    assert json.loads(new.input_json) == {"id": "o1", "qty": 1}
    assert (new.workflow, new.version, new.max_attempts) == ("ship", "v1", 3)
    assert new.available_at == NOW + timedelta(seconds=5)


@pytest.mark.parametrize(
    ("fn", "value", "options", "error"),
    [
        (ship, {"qty": 2}, {}, InvalidInput),  # no id
        (tick, {"x": 1}, {}, InvalidInput),  # takes no input
        (ship, {"id": "o1"}, {"priority": 2}, InvalidInput),  # no queue to order by
        (ship, {"id": "o1"}, {"concurrency_key": "k"}, InvalidInput),  # no queue
        (ship, {"id": "x" * 2000}, {}, PayloadTooLarge),
        (ship, {"id": "o1"}, {"available_at": "tomorrow"}, InvalidInput),
    ],
)
def test_a_bad_start_request_is_refused(
    fn: Any, value: Any, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        _define(fn).new_run(value, max_payload=1000, now=NOW, **options)


def test_a_queue_checks_its_own_options() -> None:
    wf = _define(ship, Queue("q", per_key=1))
    assert wf.new_run({"id": "o1"}, max_payload=1000, concurrency_key="k").queue == "q"
    with pytest.raises(InvalidInput):
        wf.new_run({"id": "o1"}, max_payload=1000, priority=1)


@pytest.mark.parametrize("fn", [str, int, len, dict.fromkeys], ids=lambda fn: fn.__qualname__)
def test_a_builtin_without_a_signature_can_be_a_step_body(fn: Any) -> None:
    # `ctx.step.run("s", str, x)` failed the run: inspect.signature(str) raises ValueError.
    from durably.workflow.commands import signature

    assert signature(fn) == (False, Any, False)
