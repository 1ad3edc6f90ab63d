"""What the engine writes on a worker's behalf, as values: a lease, a run to start, a step
attempt's end."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..core.codec import encode
from ..core.sealing import as_stored

if TYPE_CHECKING:
    from ..core.sealing import Codec


@dataclass(frozen=True)
class Lease:
    """A worker's claim on a run: valid while the run's fence and worker are still these."""

    run_id: str
    fence: int
    worker_id: str
    workflow_attempt: int = 1  # what the attempts this lease records belong to

    def params(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "fence": self.fence, "worker_id": self.worker_id,
                "workflow_attempt": self.workflow_attempt}  # fmt: skip


# A run started by name alone (`app.start(name, input)` on an app that registers no
# workflow: a thin client) is stored with version NEWEST and max_attempts UNKNOWN_ATTEMPTS;
# the worker that first claims it binds both, in the claim's own write, to the newest
# version of that name it registers (see `worker.byname`). An empty string, not NULL: no
# migration (SQLite cannot drop a NOT NULL without rebuilding the table), and the claim
# reads such runs from the same index range per (name, version) as any other.
NEWEST = ""
UNKNOWN_ATTEMPTS = 0


@dataclass(frozen=True)
class Debounce:
    """A debounced start's window (SPEC §4.23): starts with one `key` join the pending run
    of their workflow's window, pushing its start back to `delay_s` after the latest, never
    past `max_s` (None: no cap) after the start that opened the window."""

    key: str
    delay_s: float
    max_s: float | None = None


@dataclass(frozen=True)
class NewRun:
    """What `start()` asks to be stored."""

    workflow: str
    version: str
    input_json: str
    max_attempts: int
    idempotency_key: str | None = None
    available_at: datetime | None = None
    deadline_at: datetime | None = None
    parent_run_id: str | None = None
    run_id: str | None = None
    trace_context: str | None = None
    parent_close: str = "cancel"
    queue: str | None = None
    concurrency_key: str | None = None
    priority: int = 0
    debounce: Debounce | None = None
    # The queue's `per_key` and `on_full` as the starting code declares them: a start
    # other than "wait" is admitted on its key in its own transaction (`store.admission`).
    per_key: int | None = None
    on_full: str = "wait"
    attributes_json: str | None = None  # search attributes (`core.attributes`), or None


@dataclass
class PendingStep:
    """A step attempt's end, to be recorded (alone or by group commit).

    `seq` is set when the record resolves the step for the workflow (the next entry of the
    run's log); `wake_at`, on a failure that will be retried, is when. `signal`: a buffered
    signal a wait took at once (this is the wait's first record): recorded as delivered to
    it, as a signal sent to a waiting wait is, so a workflow retry can give it back
    (`RunEnds.retry_run`), with its expiry, `signal_expires_at`. Only a record written alone
    has one.
    """

    position: int
    attempt: int
    name: str
    kind: str
    status: str
    output_json: str | None = None
    error: dict[str, Any] | None = None
    final: bool = False
    compensable: bool = False
    elapsed_s: float = 0.0
    wake_at: datetime | None = None
    seq: int | None = None
    signal: str | None = None
    signal_expires_at: datetime | None = None

    def params(self, codec: Codec | None = None) -> dict[str, Any]:
        return {
            "position": self.position, "attempt": self.attempt, "step": self.name,
            "kind": self.kind, "status": self.status, "output": self.output_json,
            "error": encode(self.error, "error", codec=codec) if self.error else None,
            "final": self.final, "compensable": self.compensable,
            "elapsed_s": self.elapsed_s, "seq": self.seq, "wake_at": self.wake_at,
            "signal": self.signal, "signal_expires_at": self.signal_expires_at,
        }  # fmt: skip

    def batch_entry(self, lease: Lease, codec: Codec | None = None) -> str:
        head = json.dumps({
            "run_id": lease.run_id, "fence": lease.fence, "position": self.position,
            "attempt": self.attempt, "step": self.name, "kind": self.kind,
            "status": self.status, "final": self.final, "compensable": self.compensable,
            "elapsed_s": self.elapsed_s,
            "workflow_attempt": lease.workflow_attempt, "seq": self.seq,
            "wake_s": self.wake_at.timestamp() if self.wake_at else None,
        })  # fmt: skip
        error = encode(self.error, "error", codec=codec) if self.error else "null"
        # The output and error are JSON text already: spliced in, not parsed and dumped again.
        output = as_stored(self.output_json or "null")
        return f'{head[:-1]}, "error": {error}, "output": {output}}}'


@dataclass
class RunEnd:
    """A run's end, to be written with its step records still in flight (group commit).

    Its JSON is made at once: a value that cannot be stored fails this run's end alone,
    never the batch it would have joined.
    """

    lease: Lease
    status: str
    output_json: str | None = None
    error: dict[str, Any] | None = None
    records: list[PendingStep] | None = None
    codec: Codec | None = None  # the app's: its error is sealed with it

    def __post_init__(self) -> None:
        self.entry = json.dumps({
            "run_id": self.lease.run_id, "fence": self.lease.fence, "status": self.status,
            "output": as_stored(self.output_json) if self.output_json else None,
            "error": encode(self.error, "error", codec=self.codec) if self.error else None,
        })  # fmt: skip
