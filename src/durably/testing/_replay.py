"""Replay a stored history against the current code, before deploying that code.

The workflow function runs on the engine's deterministic loop; each step it issues is
checked against the history by position, name and kind, and the recorded results are
handed back in the run's log order. No step body runs and nothing is written: a history
exported from production (`durably show --json RUN`) can be checked on a laptop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core.codec import canonical, encode
from ..core.errors import NonDeterminismError
from ..core.sealing import Codec
from ..execution.loop import WorkflowLoop
from ..store.history import History, Recorded
from ..workflow.commands import Command, error_for, never_awaited, recorded_value, typed
from ..workflow.context import WorkflowContext
from ..workflow.steps import StepApi
from ..workflow.syncflow import SyncDriver
from ..workflow.syncsteps import SyncStepApi, SyncWorkflowContext

if TYPE_CHECKING:
    from ..client.durably import Durably
    from ..workflow.definition import Definition


@dataclass(frozen=True)
class ReplayReport:
    """What a replay that found no non-determinism saw.

    Attributes:
        run_id: the replayed run.
        workflow: its workflow's name and version, as `name@version`.
        results_replayed: recorded results handed back to the code.
        finished: the code returned or raised within the history.
        output: what it returned now (when it finished by returning).
        output_changed: for a completed run, whether that output differs from the stored
            one (code may change what it returns; it is reported, not refused).
    """

    run_id: str
    workflow: str
    results_replayed: int
    finished: bool
    output: Any = None
    output_changed: bool = False


def replay(app: Durably, history: dict[str, Any] | str) -> ReplayReport:
    """Replay `history` (the JSON of `durably show --json RUN`) against `app`'s code.

    Args:
        app: the application with the current code registered (it is not connected).
        history: the exported document, as text or parsed.

    Returns:
        A `ReplayReport` when the code still matches the history.

    Raises:
        NonDeterminismError: the code issues a different step where the history has one,
            misses a step the history has, or (for a finished run) issues steps beyond it;
            the message names the position and both steps.
        WorkflowNotFound: the run's workflow version is not registered.
        WorkflowMisuseError: the code did something that cannot be replayed.
    """
    doc = json.loads(history) if isinstance(history, str) else history
    run, steps = doc["run"], doc["steps"]
    wf = app.get_workflow(run["workflow"], run["version"])
    view = History(_entries(steps), run.get("attempts") or 1, run.get("resumes") or ())
    replayer = _Replayer(run["run_id"], view)
    main, driver = _start(wf, replayer, run)
    try:
        replayer.drive()
        for rec in replayer.history.log:
            if view.skips(rec, replayer._position):  # a resume's fresh budget
                view.forget(rec.position)
                continue
            replayer.deliver(rec, main.done())
        replayer.check_end(run["status"], main.done())
    finally:
        if driver is not None:
            driver.close()  # a sync workflow's thread still waiting on a step unwinds
        elif not main.done():
            main.cancel()
            replayer.loop.run_until_blocked()
        replayer.loop.close()
    return _report(run, wf.name, wf.version, len(replayer.history.log), main)


def _start(
    wf: Definition[Any, Any], replayer: _Replayer, run: dict[str, Any]
) -> tuple[asyncio.Task[Any], SyncDriver | None]:
    """The workflow's main task on the replayer's loop (and a sync workflow's driver)."""
    steps = StepApi(replayer)
    value = wf.parse_input(run["input"]) if wf.takes_input else None
    attempt = run.get("attempts") or 1
    if wf.sync:
        driver = SyncDriver(wf.fn, (), f"durably-replay-{run['run_id']}", replayer.poison)
        sync_ctx = SyncWorkflowContext(run["run_id"], wf.name, wf.version, attempt,
                                       SyncStepApi(steps, driver), value,
                                       *_times(run))  # fmt: skip
        driver.args = (sync_ctx, value) if wf.takes_input else (sync_ctx,)
        return replayer.loop.create_task(driver.main()), driver
    ctx = WorkflowContext(run["run_id"], wf.name, wf.version, attempt, steps, value,
                          *_times(run))  # fmt: skip
    args = (ctx, value) if wf.takes_input else (ctx,)
    return replayer.loop.create_task(wf.fn(*args)), None


class _Replayer:
    """A `Runtime` (what `StepApi` needs of a run), as the engine's `Execution` is one."""

    max_payload = 1 << 62
    codec: Codec | None = None  # a replay writes nothing

    def __init__(self, run_id: str, history: History) -> None:
        self.run_id = run_id
        self.history = history
        self.loop = WorkflowLoop(self.poison)  # I/O is refused
        self.commands: dict[int, Command] = {}
        self._position = 0
        self._error: BaseException | None = None

    def encode(self, value: Any, what: str) -> str:
        """A value the code publishes (`set_event`), refused as the engine refuses it."""
        return encode(value, what, self.max_payload)

    def next_position(self) -> int:
        return self._position + 1

    def received(self) -> int:
        """Nothing runs here: what a `compensate()` would undo does not matter."""
        return 0

    def marker_pending(self, position: int) -> None:
        """Nothing is recorded here: a new patch marker holds nothing back."""

    def value_pending(self, cmd: Command, output_json: str) -> None:
        """Nor a new value (`ctx.now()`, ...): the code has it, as it would live."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def poison(self, error: BaseException) -> None:
        """The code did what cannot be replayed (the engine's `Execution.poison`)."""
        self._error = self._error or error

    def issue(self, make: Callable[[int], Command], name: str, kind: str) -> Command:
        self._position += 1
        try:
            rec = self.history.at(self._position, name, kind)
        except NonDeterminismError as exc:
            self._error = self._error or exc
            raise
        cmd = make(self._position)
        cmd.recorded = rec
        cmd.dropped = self._dropped
        self.commands[cmd.position] = cmd
        return cmd

    def _dropped(self, cmd: Command) -> None:
        if self.loop.is_running():  # as the engine's (`Execution._dropped`)
            self.poison(never_awaited(cmd))

    def drive(self) -> None:
        self.loop.run_until_blocked()
        if self._error is not None:
            raise self._error

    def deliver(self, rec: Recorded, ended: bool) -> None:
        cmd = self.commands.get(rec.position)
        if cmd is None:
            found = "nothing more (it ended)" if ended else "no step there (it waits on others)"
            raise NonDeterminismError(rec.position, rec.describe(), found)
        if not cmd.future.done():
            if rec.completed:
                try:  # as the engine's `Execution.receive`
                    cmd.future.set_result(typed(cmd, recorded_value(rec)))
                except Exception as exc:
                    cmd.future.set_exception(exc)
            else:
                cmd.future.set_exception(error_for(rec))
        self.drive()

    def check_end(self, status: str, ended: bool) -> None:
        """A finished run's history is complete: steps beyond it are a change."""
        if status not in ("continued", "completed", "failed", "canceled"):
            return
        for position, cmd in sorted(self.commands.items()):
            if cmd.recorded is None:
                raise NonDeterminismError(
                    position, f"the end of the run's history (the run {status})",
                    f"{cmd.kind} step {cmd.name!r}",
                )  # fmt: skip
        if not ended and status in ("completed", "continued"):
            raise NonDeterminismError(
                self._position + 1, "the end of the run's history (the run completed)",
                "nothing, yet it has not returned (it waits on a step it did not issue)",
            )  # fmt: skip


def _times(run: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    """The run's `created_at` and `started_at`, as the export wrote them (ISO text)."""
    out = []
    for key in ("created_at", "started_at"):
        value = run.get(key)
        out.append(datetime.fromisoformat(value) if isinstance(value, str) else value)
    return out[0], out[1]


def _entries(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History entries from exported step attempts (a log order from the times when an
    older export has no `seq`)."""
    entries = [dict(s) for s in steps]
    for e in entries:  # a request's wait is a signal wait (`StepAttempt.to_dict`)
        if e.get("kind") == "request-wait":
            e["kind"] = "signal-wait"
    if entries and all(e.get("seq") is None for e in entries):
        ended = sorted((e for e in entries if e.get("finished_at")),
                       key=lambda e: e["finished_at"])  # fmt: skip
        for seq, e in enumerate(ended, 1):
            e["seq"] = seq
            e.setdefault("final", e["status"] == "completed")
    return entries


def _report(
    run: dict[str, Any], name: str, version: str, replayed: int, main: asyncio.Task[Any]
) -> ReplayReport:
    finished = main.done() and not main.cancelled()
    output = main.result() if finished and main.exception() is None else None
    changed = False
    if finished and run["status"] == "completed" and main.exception() is None:
        changed = canonical(json.loads(encode(output, "the output"))) != canonical(run["output"])
    return ReplayReport(run["run_id"], f"{name}@{version}", replayed, finished, output, changed)
