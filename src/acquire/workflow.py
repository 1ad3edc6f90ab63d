"""The workflow `acquire` (v1): submit → wait → import → register → seed → cleanup.

Every step is written to be re-run after a crash at any point:
- submit computes the info hash first and finds a torrent the client already took;
- the wait is a chain of child workflows (`acquire-watch`, see `acquire.watch`) that each
  check the client a bounded number of times, so a download of any length never reaches
  the run's step-attempt limit; the finish hook's signal (`download-done:<id>`, sent by
  `acquire notify`) ends a wait at once; no progress for `stall` fails the run (stalled);
- the import (`copy-file`, see `acquire.importer`) hard-links or atomically copies every
  chosen file under its library name; a file already there counts as done;
- register is one row, written in the same transaction as the step's record, so a worker
  that lost its lease cannot register;
- seeding goals (ratio, time) are watched like the download; without one, `retention` is
  a durable sleep;
- cleanup removes the torrent and its data; an unknown torrent counts as removed.
A run that fails or is canceled runs the compensation of submit: the torrent and its data
are removed from the client.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from durably import (
    Durably,
    DurablyError,
    NonRetryableError,
    RetryPolicy,
    StepContext,
    WorkflowContext,
    parse_duration,
)

from . import importer, library, naming, watch
from .clients import client_for
from .watch import Watch

app = Durably()  # DURABLY_DATABASE_URL, else the embedded sqlite:///durably.db
ClientName = Literal["qbittorrent", "local"]


class Order(BaseModel):
    """What to acquire, where to put it, how to name it, and how long to seed it."""

    id: str
    source: str
    library: str
    client: ClientName = "local"
    retention: str = "7 days"
    link: Literal["auto", "hardlink", "copy"] = "auto"
    template: str | None = None
    title: str | None = None
    year: int | None = None
    seed_ratio: float | None = Field(default=None, gt=0)
    seed_time: str | None = None
    stall: str | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", value):
            raise ValueError("use 1-100 letters, digits and . _ : -")
        return value

    @field_validator("retention", "seed_time", "stall")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            seconds = parse_duration(value).total_seconds()
        except DurablyError as exc:
            raise ValueError(str(exc)) from None
        if seconds <= 0:
            raise ValueError("must be longer than zero")
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None:
            naming.check_template(value)  # BadTemplate is a ValueError: a validation error
        return value

    @field_validator("year")
    @classmethod
    def _year(cls, value: int | None) -> int | None:
        if value is not None and not 1870 <= value <= 2200:
            raise ValueError("a year such as 2001")
        return value


class DownloadStalled(NonRetryableError):
    """The download made no progress for the order's `stall` duration."""


def submit(ctx: StepContext, order: Order) -> dict[str, Any]:
    sub = client_for(order.client).submit(order.id, order.source)
    return {"client": order.client, "hash": sub.info_hash, "name": sub.name,
            "already": sub.already}  # fmt: skip


def undo_submit(sub: dict[str, Any]) -> None:
    client_for(sub["client"]).remove(sub["hash"])


def cleanup(client: ClientName, info_hash: str) -> None:
    client_for(client).remove(info_hash)


def _watch(order: Order, sub: dict[str, Any], **extra: Any) -> Watch:
    first, most = watch.poll_first(), watch.poll_max()
    stall = parse_duration(order.stall).total_seconds() if order.stall else None
    if stall is not None:  # check often enough to notice a stall in good time
        most = min(most, max(stall / 4, first))
    return Watch(id=order.id, client=order.client, hash=sub["hash"], source=order.source,
                 interval=first, max_interval=most, stall=stall, **extra)  # fmt: skip


@app.workflow(name="acquire-watch", version="v1", retry=RetryPolicy(max_attempts=1))
async def acquire_watch(ctx: WorkflowContext, w: Watch) -> dict[str, Any]:
    """A stretch of checks of a download or of its seeding (see `acquire.watch`)."""
    return await watch.watch_body(ctx, w)


async def wait_download(ctx: WorkflowContext, order: Order, sub: dict[str, Any]) -> dict[str, Any]:
    """Watch the download, child after child, until it is done or stalled."""
    w = _watch(order, sub)
    while True:
        result: dict[str, Any] = await ctx.step.run_workflow(acquire_watch, w,
                                                             name="wait-download")  # fmt: skip
        if result["outcome"] == "done":
            return dict(result["status"])
        if result["outcome"] == "stalled":
            st = result["status"]
            raise DownloadStalled(f"stalled: no progress for {order.stall} "
                                  f"(at {float(st['progress']) * 100:.1f}%, "
                                  f"state {st['state']})")  # fmt: skip
        w = Watch.model_validate(result["watch"])


async def seed(ctx: WorkflowContext, order: Order, sub: dict[str, Any]) -> None:
    """Keep seeding until the ratio or the time goal is reached, whichever comes first."""
    seed_time = parse_duration(order.seed_time).total_seconds() if order.seed_time else None
    w = _watch(order, sub, kind="seed", seed_ratio=order.seed_ratio, seed_time=seed_time)
    while True:
        result: dict[str, Any] = await ctx.step.run_workflow(acquire_watch, w, name="seeding")
        if result["outcome"] == "goal":
            return
        w = Watch.model_validate(result["watch"])


@app.workflow(name="acquire", version="v1", retry=RetryPolicy(max_attempts=1))
async def acquire(ctx: WorkflowContext, order: Order) -> dict[str, Any]:
    sub = await ctx.step.run("submit-download", submit, order, compensate=undo_submit)
    done = await wait_download(ctx, order, sub)
    content = done["content_path"] or order.source
    copied = await ctx.step.run("copy-file", importer.import_download, order, content,
                                retry=RetryPolicy(max_attempts=5))  # fmt: skip
    entry = {"order_id": order.id, "path": copied["path"], "size": copied["size"],
             "sha256": copied["sha256"], "run_id": ctx.run_id}  # fmt: skip
    await ctx.step.transaction("register", library.register, entry)
    if order.seed_ratio is not None or order.seed_time is not None:
        await seed(ctx, order, sub)
    else:
        await ctx.step.sleep("retention", order.retention)
    await ctx.step.run("cleanup", cleanup, order.client, sub["hash"])
    return {"order": order.id, "hash": sub["hash"], "path": copied["path"],
            "files": [f["path"] for f in copied["files"]], "mode": copied["mode"]}  # fmt: skip
