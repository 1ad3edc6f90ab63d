"""The exception tree of durably.

    DurablyError                     root; its docstring is the default message
    ├── ConfigurationError           bad URL, schema name, duration, option
    ├── InvalidInput                 workflow input or payload rejected; nothing was written
    │   └── InvalidDuration          a duration or time that is not one (also a
    │                                ConfigurationError: it was one before)
    │   └── PayloadTooLarge          a JSON payload over the configured limit
    ├── WorkflowNotFound             no workflow registered under that name (and version)
    ├── RunNotFound                  no run with that id
    ├── SignalNotFound               no stored signal with that id
    ├── RunTerminalError             the run already finished; the message names its status
    ├── IdempotencyConflictError     same idempotency key, different input
    ├── NonDeterminismError          replay found a different step than history recorded
    ├── WorkflowMisuseError          workflow code did what cannot be replayed (fails the run)
    ├── LeaseLostError               this worker no longer owns the run; nothing was committed
    ├── StepFailedError              a step failed for good (raised in the workflow, also on replay)
    ├── ChildWorkflowError           a child run failed or was canceled
    ├── WorkflowTimeoutError         waiting for a child (or a result) took longer than allowed
    ├── RequestRejected              the workflow rejected a request (`app.request`)
    ├── DeadlineExceeded             the run's deadline_at passed
    ├── RunFailedError               `handle.result()` of a run that failed or was canceled
    ├── StepLimitExceeded            the run reached its limit of step attempts
    ├── StepTimeout                  a step body ran past its `timeout` (retried by policy)
    └── DatabaseUnavailable          the database could not be reached
        └── DatabaseConflict         a transaction aborted whole (a deadlock, a stale
                                     statement); nothing of it was written (run it again)

The engine's own control flow (a lost lease, non-determinism, cancellation, a failed
engine write) never reaches workflow code as something it could catch and carry on from:
the execution stops driving the workflow (see `_execution`), so `except Exception:` in a
workflow cannot turn them into a fallback path.

A step body may raise `NonRetryableError` (not a DurablyError: it is the user's) to fail
its step at once, without spending the remaining attempts.

User code that raises what is not an `Exception` (`SystemExit` from argparse or click,
`KeyboardInterrupt`, `GeneratorExit`, a `BaseException` of its own) fails its step or
workflow as any error does (SPEC §4.20); only the engine's own cancellation is not a failure.
"""

from __future__ import annotations

import asyncio
import traceback as _tb
from typing import Any


class DurablyError(Exception):
    """Something went wrong in durably."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(DurablyError):
    """The configuration is invalid."""


class InvalidInput(DurablyError):
    """The input was rejected; nothing was written."""


class InvalidDuration(ConfigurationError, InvalidInput):
    """Not a duration (or a time) durably can use."""


class PayloadTooLarge(InvalidInput):
    """The payload is larger than the configured limit."""


class WorkflowNotFound(DurablyError):
    """No workflow is registered under that name."""


class RunNotFound(DurablyError):
    """No run has that id."""


class SignalNotFound(DurablyError):
    """No stored signal with that id."""


class RunTerminalError(DurablyError):
    """The run has already finished."""

    def __init__(self, run_id: str, status: str, action: str = "change") -> None:
        super().__init__(f"cannot {action} run {run_id}: it is already {status}")
        self.run_id = run_id
        self.status = status


class IdempotencyConflictError(DurablyError):
    """A run with this idempotency key exists with a different input."""


class NonDeterminismError(DurablyError):
    """The workflow code no longer matches the run's recorded history."""

    def __init__(self, position: int, expected: str, found: str) -> None:
        super().__init__(
            f"non-deterministic replay at step position {position}: history has "
            f"{expected}, the code now calls {found}. The usual cause is time, randomness "
            "or I/O in workflow code, outside a step (datetime.now(), random, "
            "uuid.uuid4(), a file, the network): use ctx.now(), ctx.random(), "
            "ctx.uuid4(), or do it in ctx.step.run. Or the code changed under a run in "
            "flight: register the change as a new version, or branch on ctx.patched()."
        )
        self.position = position
        self.expected = expected
        self.found = found


class WorkflowMisuseError(DurablyError):
    """Workflow code did something that cannot be replayed; the run fails."""


class StepTimeout(DurablyError):
    """A step body ran longer than its `timeout`."""


class LeaseLostError(DurablyError):
    """This worker lost the run's lease; nothing was committed."""


class StepFailedError(DurablyError):
    """A step failed for good."""

    def __init__(self, step: str, error: dict[str, Any], attempts: int = 1) -> None:
        tries = f"after {attempts} attempts" if attempts > 1 else "after 1 attempt"
        super().__init__(
            f"step {step!r} failed {tries}: {error.get('type')}: {error.get('message')}"
        )
        self.step = step
        self.error = error
        self.attempts = attempts


class ChildWorkflowError(DurablyError):
    """A child workflow failed or was canceled."""

    def __init__(self, run_id: str, status: str, error: dict[str, Any] | None) -> None:
        detail = f": {error.get('message')}" if error else ""
        super().__init__(f"child run {run_id} {status}{detail}")
        self.run_id = run_id
        self.status = status
        self.error = error


class WorkflowTimeoutError(DurablyError):
    """The wait timed out."""


class RequestTimeout(WorkflowTimeoutError):
    """No answer came to a request in time (`app.request`); it stays pending, and the
    answer that comes later is kept for `app.get_reply(request_id)`."""

    def __init__(self, request_id: str, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id


class RequestRejected(DurablyError):
    """The workflow rejected the request (`ctx.step.reject(req, reason)`): `reason`."""

    def __init__(self, reason: str, request_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request_id = request_id


class DeadlineExceeded(DurablyError):
    """The run's deadline passed."""


class RunFailedError(DurablyError):
    """The run did not complete."""

    def __init__(self, run_id: str, status: str, error: dict[str, Any] | None) -> None:
        detail = f": {error.get('type')}: {error.get('message')}" if error else ""
        super().__init__(f"run {run_id} {status}{detail}")
        self.run_id = run_id
        self.status = status
        self.error = error


class StepLimitExceeded(DurablyError):
    """The run reached its limit of step attempts (Durably(max_step_attempts=...))."""


class DatabaseUnavailable(DurablyError):
    """The database could not be reached."""


class DatabaseConflict(DatabaseUnavailable):
    """The database aborted a transaction whole (a deadlock, a serialization failure, a
    statement the schema changed under): nothing of it was written, and running it again
    may succeed."""


# Failures that would repeat on every attempt: a value refused (an input its model no
# longer accepts, a result JSON cannot hold), code that does not match its run's history,
# the API misused (a forgotten await). No retry policy retries them.
MISUSE = (InvalidInput, NonDeterminismError, WorkflowMisuseError)
_MISUSE_NAMES = {c.__name__ for c in (*MISUSE, InvalidDuration, PayloadTooLarge)}


def is_misuse(exc: BaseException) -> bool:
    """Whether `exc` is a `MISUSE` failure, or a step's that failed with one (a step body
    that returned a coroutine: it forgot an await)."""
    if isinstance(exc, StepFailedError):
        return exc.error.get("type") in _MISUSE_NAMES
    return isinstance(exc, MISUSE)


class NonRetryableError(Exception):
    """Raise from a step body to fail the step without further attempts."""


class BaseFailure(Exception):
    """A `BaseException` that is not an `Exception`, raised by user code, carried as an
    ordinary failure (asyncio lets `SystemExit` and `KeyboardInterrupt` out of the event
    loop, and `except Exception` misses them all); also a `StopIteration`, which no asyncio
    future takes. It is stored as the error it carries."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def user_failure(exc: BaseException) -> BaseException:
    """`exc`, raised by user code (a body, a compensation), as the engine handles it: an
    `Exception` (but StopIteration) or the engine's own cancellation as it is, anything
    else in a `BaseFailure`.

    A `GeneratorExit` with no frame below the one that caught it was not raised by user
    code: it is the close() of the engine's own coroutine (a pending task collected), which
    must go on unwinding.
    """
    if isinstance(exc, StopIteration):  # no future takes it (a sync body's would hang)
        return BaseFailure(exc)
    if isinstance(exc, Exception | asyncio.CancelledError):
        return exc
    tb = exc.__traceback__
    if isinstance(exc, GeneratorExit) and (tb is None or tb.tb_next is None):
        return exc
    return BaseFailure(exc)


def describe(exc: BaseException, traceback: bool = True) -> dict[str, Any]:
    """The JSON form of an error as stored on runs and step attempts, with its traceback."""
    if isinstance(exc, BaseFailure):
        exc = exc.error
    if isinstance(exc, StepFailedError):
        return {"type": "StepFailedError", "message": _storable(str(exc)), "step": exc.step,
                "attempts": exc.attempts, "cause": exc.error}  # fmt: skip
    out: dict[str, Any] = {"type": type(exc).__name__, "message": _storable(message(exc))}
    if traceback and exc.__traceback__ is not None:
        out["traceback"] = _storable("".join(_tb.format_exception(exc))[-8000:])
    return out


def message(exc: BaseException) -> str:
    """`str(exc)`, which runs user code (an error's `__str__`): whatever that raises, a
    placeholder saying so."""
    try:
        return str(exc)
    except BaseException as failed:  # SystemExit too: it is not the worker's end
        return f"<str() raised {type(failed).__name__}>"


MESSAGE_CHARS = 16_000  # an error is for people: a whole HTTP body in it helps nobody


def _storable(text: str) -> str:
    # PostgreSQL cannot store NUL in text or JSON, and no UTF-8 holds a lone surrogate (a
    # `surrogateescape`d byte, half a UTF-16 pair); a message can be any size, while what
    # is stored must stay small enough to end the run with (see `max_payload`).
    if len(text) > MESSAGE_CHARS:
        half, cut = MESSAGE_CHARS // 2, len(text) - MESSAGE_CHARS
        text = f"{text[:half]} … [{cut} characters cut] … {text[-half:]}"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")
