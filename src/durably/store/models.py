"""What callers get back: runs and step attempts, with a JSON form for the CLI and API."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from ..backends import Row
from ..core.codec import decode
from ..core.sealing import ENCRYPTED

# The signal names requests are sent as (`store.requests`): `durably:request:<name>`.
REQUEST_PREFIX = "durably:request:"

# `held`: its replay did not match its history; it waits for code that does (SPEC §4.2).
# `continued`: it ended by continue-as-new (§4.23); its chain goes on in `continued_as`.
STATUSES = ("pending", "running", "waiting", "held", "continued", "completed", "failed",
            "canceled")  # fmt: skip
TERMINAL = frozenset({"continued", "completed", "failed", "canceled"})


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _to_dict(obj: Any) -> dict[str, Any]:
    out = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        out[f.name] = _iso(value) if isinstance(value, datetime) else value
    return out


@dataclass(frozen=True)
class Run:
    """One execution of a workflow, as stored."""

    run_id: str
    workflow: str
    version: str
    status: str
    attempts: int
    input: Any
    output: Any
    error: dict[str, Any] | None
    fence: int
    worker_id: str | None
    available_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    idempotency_key: str | None
    deadline_at: datetime | None
    wake_at: datetime | None
    waiting_for: str | None
    parent_run_id: str | None
    lease_expires_at: datetime | None
    compensating: bool = False
    queue: str | None = None
    concurrency_key: str | None = None
    priority: int = 0
    resumes: tuple[int, ...] = ()  # the workflow attempts that began by `app.resume`
    continued_from: str | None = None  # the run this one continues as new (§4.23)
    debounce_key: str | None = None  # the key of the debounce window it was started in
    # Search attributes (§4.24): given at start, merged by `ctx.step.set_attributes`.
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def continued_as(self) -> str | None:
        """The run that continues this one as new (status `continued`), else None."""
        if self.status != "continued" or not isinstance(self.output, dict):
            return None
        next_id = self.output.get("continued_as")
        return next_id if isinstance(next_id, str) else None

    @property
    def terminal(self) -> bool:
        """True once the run completed, failed, was canceled or continued as new."""
        return self.status in TERMINAL

    @property
    def done(self) -> bool:
        """Terminal, and nothing of it (compensations of a cancel) is left to run."""
        return self.terminal and not self.compensating

    @classmethod
    def from_row(cls, row: Row) -> Run:
        return cls(
            run_id=row["id"], workflow=row["workflow"], version=row["version"],
            status=row["status"], attempts=row["attempts"], input=decode(row["input"]),
            output=decode(row["output"]), error=_error(row["error"]), fence=row["fence"],
            worker_id=row["worker_id"], available_at=row["available_at"],
            created_at=row["created_at"], started_at=row["started_at"],
            finished_at=row["finished_at"], idempotency_key=row["idempotency_key"],
            deadline_at=row["deadline_at"], wake_at=row["wake_at"],
            waiting_for=row["waiting_for"], parent_run_id=row["parent_run_id"],
            lease_expires_at=row["lease_expires_at"],
            compensating=bool(row.get("compensating")),
            queue=row.get("queue"), concurrency_key=row.get("concurrency_key"),
            priority=row.get("priority") or 0, resumes=tuple(decode(row.get("resumes")) or ()),
            continued_from=row.get("continued_from"), debounce_key=row.get("debounce_key"),
            attributes=decode(row.get("attributes")) or {},
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The run as JSON-ready data (the CLI's `--json` run document); `attributes`,
        `continued_as`, `continued_from` and `debounce_key` only where set (SPEC §5)."""
        out = _to_dict(self)
        for optional in ("continued_from", "debounce_key"):
            if out[optional] is None:
                del out[optional]
        if not self.attributes:
            del out["attributes"]
        if self.continued_as is not None:
            out["continued_as"] = self.continued_as
        return out


@dataclass(frozen=True)
class StepAttempt:
    """One execution of one step body (or one wait), as stored."""

    step: str
    kind: str
    status: str
    attempt: int
    position: int
    worker_id: str | None
    started_at: datetime
    finished_at: datetime | None
    output: Any
    error: dict[str, Any] | None
    fence: int
    signal: str | None
    child_run_id: str | None
    wake_at: datetime | None
    # How the workflow saw it (for `durably.testing.replay` of an exported history): its
    # place in the run's log, whether it ended the step for good, and more.
    seq: int | None = None
    final: bool = False
    compensable: bool = False
    workflow_attempt: int = 1
    delivered: bool = False

    @classmethod
    def from_row(cls, row: Row) -> StepAttempt:
        """A request's wait, stored as a signal wait on its reserved name, is a
        `request-wait` (`testing.replay` reads an export back as the signal wait it is)."""
        kind = row["kind"]
        if kind == "signal-wait" and (row["signal"] or "").startswith(REQUEST_PREFIX):
            kind = "request-wait"
        return cls(
            step=row["step"], kind=kind, status=row["status"], attempt=row["attempt"],
            position=row["position"], worker_id=row["worker_id"],
            started_at=row["started_at"], finished_at=row["finished_at"],
            output=decode(row["output"]), error=_error(row["error"]), fence=row["fence"],
            signal=row["signal"], child_run_id=row["child_run_id"], wake_at=row["wake_at"],
            seq=row.get("seq"), final=bool(row.get("final")),
            compensable=bool(row.get("compensable")),
            workflow_attempt=row.get("workflow_attempt") or 1,
            delivered=row.get("delivered_at") is not None,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The attempt as JSON-ready data (the CLI's `--json` step document)."""
        return _to_dict(self)


def _error(text: str | None) -> dict[str, Any] | None:
    """A stored error; one that could not be opened (`"<encrypted>"`) keeps an error's
    shape, so whatever shows it shows that."""
    error = decode(text)
    if error is None or isinstance(error, dict):
        return error
    return {"type": ENCRYPTED, "message": ENCRYPTED}
