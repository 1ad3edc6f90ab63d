"""Changing workflow code while runs are in flight: `ctx.patched` and `ctx.deprecate_patch`.

`patched("id")` takes the workflow's next position only when it answers True, and then
records a marker there (kind "patch", name the patch id). The marker is durable before
the workflow receives the answer and before any step issued after it (a sibling branch's
too) starts: were a later position recorded first and the worker killed, replay would find
history past the marker's position without it, answer False and shift every position.
It answers:
- True, replaying, where history holds that marker;
- False where history holds anything else at or after this position: the run went past this
  point under the code before the patch, so the old path is the one to replay (the
  position is left to the step the old code called there);
- True, recording the marker, where history ends before this position: the run reaches
  this point for the first time (a new run, or an old one that parked before it).

`deprecate_patch("id")`, for the cleanup deploy once every run takes the new path: it
consumes a marker recorded by `patched("id")` at this position and records nothing, so
runs started before and after the cleanup both replay.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runtime import Runtime
    from .steps import StepApi

KIND = "patch"


def patched(steps: StepApi, patch_id: str) -> asyncio.Future[Any]:
    """An awaitable of whether this run takes the patched path (see the module)."""
    x: Runtime = steps._x
    position = x.next_position()
    rec = x.history.recorded_at(position)
    if not (rec is not None and rec.kind == KIND and rec.step == patch_id) and (
        x.history.reaches(position)
    ):
        old: asyncio.Future[Any] = x.loop.create_future()
        old.set_result(False)
        return old
    cmd = steps._issue(patch_id, KIND)
    cmd.awaited = True  # a marker is recorded whether or not its answer is read
    if rec is None:
        x.marker_pending(position)
    return cmd.future


def deprecate_patch(steps: StepApi, patch_id: str) -> asyncio.Future[None]:
    """Consume the marker `patched(patch_id)` recorded here, if there is one; done at once
    (awaiting what it returns is allowed, and not needed)."""
    x: Runtime = steps._x
    rec = x.history.recorded_at(x.next_position())
    if rec is not None and rec.kind == KIND and rec.step == patch_id:
        steps._issue(patch_id, KIND).awaited = True
    done: asyncio.Future[None] = x.loop.create_future()
    done.set_result(None)
    return done
