"""Which completed steps of a run are undone, and that each is undone once.

A step with an undo (`compensate=`) that completed durably is noted with its log entry
(`add`). A `ctx.step.compensate()` takes the undos of the steps the workflow had received
when it called it; the run's end (failed, canceled) takes the rest. What is taken is undone
by nothing else, but for an undo that failed for good: it may be taken again at the end.
Running them is `compensations`'s.
"""

from __future__ import annotations

from ..store.history import History, Recorded
from ..workflow.commands import Command


class Undos:
    """The undos of one execution's completed steps, and which of them are taken."""

    def __init__(self, history: History) -> None:
        self._history = history
        self._done: list[tuple[int, Command]] = []  # (log entry, step) of each with an undo
        self._taken: set[int] = set()  # positions a compensate() or the end took to undo

    def add(self, seq: int, cmd: Command) -> None:
        """`cmd` completed durably at log entry `seq`, and has an undo."""
        self._done.append((seq, cmd))

    def take(self, through: int | None = None) -> list[Command]:
        """The completed steps to undo now, newest first, taken (nothing else undoes them):
        those whose results are log entries up to `through` (all: None), not taken yet by
        a `compensate()` (live or replayed) or the run's end. An earlier claim may have run
        some of their undos already (`run_compensation` does not run those again)."""
        newest = sorted(self._done, key=lambda c: c[0], reverse=True)
        todo = list(dict.fromkeys(
            cmd for seq, cmd in newest
            if (through is None or seq <= through) and cmd.position not in self._taken
        ))  # fmt: skip
        self._taken.update(cmd.position for cmd in todo)
        return todo

    def failed(self, cmd: Command) -> None:
        """`cmd`'s undo failed for good: it may be taken again (at the run's end)."""
        self._taken.discard(cmd.position)

    def took(self, cmd: Command, rec: Recorded) -> None:
        """A `compensate()` replayed from its record took what it took live (what it
        names, then, whichever claim ran the undos): the same steps, but for those whose
        undo failed for good (tried again at the run's end). A fork holds no undo's
        record: what the old run's `compensate()` undid stays taken."""
        for done in self.take(cmd.spec.through):
            undo = self._history.recorded_at(-done.position - 1)
            if not rec.completed and undo is not None and not undo.completed:
                self.failed(done)
