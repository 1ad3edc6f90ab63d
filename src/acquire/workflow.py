"""The workflow `acquire` (v1): submit → wait → copy → register → retention → cleanup.

Every step is written to be re-run after a crash at any point:
- submit computes the info hash first and finds a torrent the client already took;
- the wait is a durable signal (`download-done:<id>`, sent by `acquire notify` from
  qBittorrent's finish hook) with a status check on a growing interval as fallback;
- copy writes a temp file in the library, fsyncs and renames it; an identical file
  already there counts as done;
- register is one row, written in the same transaction as the step's record, so a worker
  that lost its lease cannot register;
- cleanup removes the torrent and its data; an unknown torrent counts as removed.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, field_validator

from durably import (
    Durably,
    DurablyError,
    NonRetryableError,
    RetryPolicy,
    StepContext,
    WorkflowContext,
    parse_duration,
)

from . import faults, files, library
from .clients import client_for

app = Durably()  # DURABLY_DATABASE_URL, else the embedded sqlite:///durably.db
ClientName = Literal["qbittorrent", "local"]


class Order(BaseModel):
    """What to acquire, and where to put it."""

    id: str
    source: str
    library: str
    client: ClientName = "local"
    retention: str = "7 days"

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", value):
            raise ValueError("use 1-100 letters, digits and . _ : -")
        return value

    @field_validator("retention")
    @classmethod
    def _retention(cls, value: str) -> str:
        try:
            parse_duration(value)
        except DurablyError as exc:
            raise ValueError(str(exc)) from None
        return value


def submit(ctx: StepContext, order: Order) -> dict[str, Any]:
    sub = client_for(order.client).submit(order.id, order.source)
    return {"client": order.client, "hash": sub.info_hash, "name": sub.name,
            "already": sub.already}  # fmt: skip


def undo_submit(sub: dict[str, Any]) -> None:
    client_for(sub["client"]).remove(sub["hash"])


def check(client: ClientName, info_hash: str) -> dict[str, Any]:
    st = client_for(client).status(info_hash)
    if not st.exists:
        raise NonRetryableError(f"the download {info_hash} is gone from the client")
    return {"done": st.done, "progress": st.progress, "state": st.state,
            "content_path": st.content_path}  # fmt: skip


def copy(ctx: StepContext, order: Order, content_path: str) -> dict[str, Any]:
    src = Path(content_path)
    if not src.is_file():
        raise NonRetryableError(f"the download is not a single file: {src}")
    dest_dir = Path(order.library)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    last = [0.0]
    pause = faults.copy_delay()

    def checkpoint(done: int, total: int) -> None:
        ctx.raise_if_cancelled()
        if pause:
            time.sleep(pause)
        if done - last[0] >= 64 * 1024 * 1024:  # a long copy keeps its lease alive
            last[0] = done
            ctx.heartbeat()

    try:
        copied = files.atomic_copy(src, dest, f"{ctx.run_id[:8]}-{ctx.fence.fence}", checkpoint)
    except FileExistsError as exc:
        raise NonRetryableError(str(exc)) from None
    faults.maybe_kill("kill-after-rename")  # drills: renamed, but the step is not recorded
    return {"path": str(dest), "size": dest.stat().st_size, "sha256": files.digest(dest),
            "copied": copied}  # fmt: skip


def cleanup(client: ClientName, info_hash: str) -> None:
    client_for(client).remove(info_hash)


POLL_FIRST = os.environ.get("ACQUIRE_POLL", "5s")
POLL_MAX = parse_duration(os.environ.get("ACQUIRE_POLL_MAX", "15m"))


async def wait_download(ctx: WorkflowContext, order: Order, sub: dict[str, Any]) -> dict[str, Any]:
    """Wait for the finish hook's signal, checking the client on a growing interval."""
    interval = parse_duration(POLL_FIRST)
    while True:
        await ctx.step.wait_for_signal(f"download-done:{order.id}", timeout=interval,
                                       name="wait-download")  # fmt: skip
        status: dict[str, Any] = await ctx.step.run(
            "check-download", check, order.client, sub["hash"]
        )
        if status["done"]:
            return status
        interval = min(interval * 2, POLL_MAX)


@app.workflow(name="acquire", version="v1", retry=RetryPolicy(max_attempts=1))
async def acquire(ctx: WorkflowContext, order: Order) -> dict[str, Any]:
    sub = await ctx.step.run("submit-download", submit, order, compensate=undo_submit)
    done = await wait_download(ctx, order, sub)
    content = done["content_path"] or order.source
    copied = await ctx.step.run("copy-file", copy, order, content,
                                retry=RetryPolicy(max_attempts=5))  # fmt: skip
    entry = {"order_id": order.id, "path": copied["path"], "size": copied["size"],
             "sha256": copied["sha256"], "run_id": ctx.run_id}  # fmt: skip
    await ctx.step.transaction("register", library.register, entry)
    await ctx.step.sleep("retention", order.retention)
    await ctx.step.run("cleanup", cleanup, order.client, sub["hash"])
    return {"order": order.id, "hash": sub["hash"], "path": copied["path"]}
