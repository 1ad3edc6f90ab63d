"""Values workflow code may read where it would otherwise break replay: `ctx.now()`,
`ctx.random()`, `ctx.uuid4()`.

Each call takes the workflow's next position, as a step does (kind "value", named for what
it reads: "now", "random", "uuid4"), and returns at once, without awaiting anything:
- replaying, the value history recorded at that position;
- reached for the first time, a fresh one, handed to the code now and recorded behind it
  (`Runtime.value_pending`). The code may compute with it at once; nothing it does next can
  be seen outside before the value is durable: a step issued after it starts only once it
  is (a patch marker's rule), the run parks only then, and the run's end writes it with
  the end. The values a pass reads go in the statement of the records it followed, while
  those wait for theirs (`RunLog.send_values`): reading values costs no round trip.
"""

from __future__ import annotations

import random as _random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.codec import decode, encode

if TYPE_CHECKING:
    from .steps import StepApi

KIND = "value"
T = TypeVar("T")
_SOURCE = _random.SystemRandom()  # the OS's randomness: no seed to guess, nothing shared


def now(steps: StepApi) -> datetime:
    """The current time, aware, in UTC (the database's clock, as the engine estimates it)."""
    clock = steps._x.now
    return _recorded(steps, "now", lambda: clock().astimezone(UTC), datetime.isoformat,
                     datetime.fromisoformat)  # fmt: skip


def random(steps: StepApi) -> float:
    """A float in [0.0, 1.0)."""
    return _recorded(steps, "random", _SOURCE.random, float, float)


def uuid4(steps: StepApi) -> uuid.UUID:
    """A random UUID (version 4)."""
    return _recorded(steps, "uuid4", uuid.uuid4, str, uuid.UUID)


def _recorded(
    steps: StepApi, name: str, make: Callable[[], T], dump: Callable[[T], Any],
    load: Callable[[Any], T],
) -> T:  # fmt: skip
    x = steps._x
    cmd = steps._issue(name, KIND)
    cmd.awaited = True  # nothing awaits it: the value is returned
    rec = cmd.recorded
    if rec is not None and rec.completed:
        value = load(rec.output)
    else:
        value = make()
        text = encode(dump(value), f"the value of ctx.{name}()", codec=x.codec)
        value = load(decode(text))  # what a replay will return, exactly
        x.value_pending(cmd, text)
    cmd.future.set_result(value)
    return value
