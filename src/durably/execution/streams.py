"""Streams a run publishes (§4.21): `ctx.step.write_stream` and `close_stream`, steps of
kind "stream", and the writer a step body's `sctx.write_stream` goes through.

A workflow's write is recorded once, as the next entry of the run's log, in the
transaction that appends the value (`store.streams`): replay finds the record and writes
nothing; a kill before its commit leaves neither, and the code writes it again when the
run is replayed. A step body's write is the value alone, at once: a retried attempt of
the step writes again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..core.codec import encode
from ..store.streams import Streams
from ..workflow.commands import Command, StreamClose, StreamWrite
from .claimed import Claimed


async def run_stream(x: Claimed, cmd: Command, spec: StreamWrite | StreamClose) -> None:
    attempt = x.new_attempt(cmd.position)
    seq = x.log.reserve()
    streams = Streams(x.store)
    try:
        if isinstance(spec, StreamWrite):
            value: int | None = await streams.write_step(
                x.lease, cmd.position, attempt, cmd.name, spec.key, seq, spec.value_json
            )
        else:
            await streams.close_step(x.lease, cmd.position, attempt, cmd.name, spec.key, seq)
            value = None
    except BaseException:
        x.log.unreserve(seq)
        raise
    x.log.publish(seq, cmd, value=value)


def body_writer(x: Claimed) -> Callable[[str, Any], Coroutine[Any, Any, int]]:
    """What a step body's `sctx.write_stream` calls: encodes at once (InvalidInput in the
    body), then writes in call order (one at a time, so the offsets follow the calls)."""
    streams = Streams(x.store)
    lease = x.lease
    lock = asyncio.Lock()

    def write(key: str, value: Any) -> Coroutine[Any, Any, int]:
        value_json = encode(value, f"the value written to stream {key!r}", x.max_payload, x.codec)

        async def written() -> int:
            async with lock:
                return await streams.append(lease, key, value_json)

        return written()

    return write
