"""What a run may still spend: step attempts, and its history's size (every claim reads
the history whole). A claim that passes either limit poisons its execution: the run fails,
with the error that says which limit and how to stay under it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.codec import encode
from ..core.errors import DurablyError, PayloadTooLarge, StepLimitExceeded
from ..core.sealing import Codec
from ..store.history import History


class Budget:
    """One claim's count of its run's step attempts and history bytes, against the limits."""

    def __init__(
        self,
        run_id: str,
        history: History,
        history_bytes: int,
        max_payload: int,
        max_step_attempts: int,
        max_history_bytes: int,
        poison: Callable[[BaseException], None],
        codec: Codec | None = None,
    ) -> None:
        self._run_id = run_id
        self._history = history  # its attempts, counted in all the run's claims
        # The history's size as claimed, and what this claim encoded to record since (a
        # signal's data is counted by the next claim's read).
        self._history_bytes = history_bytes
        self._max_payload = max_payload
        self._max_step_attempts = max_step_attempts
        self._max_history_bytes = max_history_bytes
        self._poison = poison
        self._codec = codec

    def encode(self, value: Any, what: str, history: bool = True) -> str:
        """`value` as JSON to record (counted in the run's history, unless `history` is
        False)."""
        text = encode(value, what, self._max_payload, self._codec)
        if history:
            self._history_bytes += len(text)
        return text

    def recorded(self, text: str) -> None:
        """`text` is to be recorded in the run's history (encoded elsewhere)."""
        self._history_bytes += len(text)

    def new_attempt(self, position: int, spend: bool = True) -> int:
        """The number of the next attempt at `position`, counted against the run's limit
        (compensations are not: a run at its limit must still undo)."""
        if spend:
            self._spend_attempt()
        attempt = self._history.next_attempt(position)
        self._history.took_attempt(position, attempt)
        return attempt

    def _spend_attempt(self) -> None:
        """Count one more step attempt against the run's limits: of attempts, and of its
        history's size."""
        self._history.attempts += 1
        error: DurablyError | None = None
        if self._history.attempts > self._max_step_attempts:
            error = StepLimitExceeded(
                f"run {self._run_id} reached its limit of {self._max_step_attempts} step attempts"
            )
        elif self._history_bytes > self._max_history_bytes:
            error = PayloadTooLarge(
                f"run {self._run_id}'s history reached {self._history_bytes} bytes, past its "
                f"limit of {self._max_history_bytes} (Durably(max_history_bytes=...) sets "
                "it): return less from its steps, or continue in a child or a new run"
            )
        if error is not None:
            self._poison(error)
            raise error
