"""durably: durable workflows for Python on PostgreSQL and SQLite.

Example:
    ```python
    from durably import Durably

    app = Durably("sqlite:///durably.db")

    @app.workflow(name="hello", version="v1")
    async def hello(ctx, name: str) -> str:
        greeting = await ctx.step.run("greet", lambda: f"hello {name}")
        await ctx.step.sleep("pause", "1s")
        return greeting
    ```
"""

from ._app import Durably
from ._context import Fence, StepContext, WorkflowContext
from ._durations import parse_duration
from ._errors import (
    ChildWorkflowError,
    ConfigurationError,
    DatabaseUnavailable,
    DeadlineExceeded,
    DurablyError,
    IdempotencyConflictError,
    InvalidInput,
    LeaseLostError,
    NonDeterminismError,
    NonRetryableError,
    PayloadTooLarge,
    RunFailedError,
    RunNotFound,
    RunTerminalError,
    SignalNotFound,
    StepFailedError,
    StepLimitExceeded,
    StepTimeout,
    WorkflowMisuseError,
    WorkflowNotFound,
    WorkflowTimeoutError,
)
from ._models import Run, StepAttempt
from ._queues import Queue
from ._retry import RetryPolicy
from ._steps import ChildHandle
from ._sync import SyncDurably
from ._syncsteps import SyncChildHandle, SyncStepApi, SyncWorkflowContext
from ._worker import Worker
from ._workflow import RunHandle, Workflow

__all__ = [
    "ChildHandle",
    "ChildWorkflowError",
    "ConfigurationError",
    "DatabaseUnavailable",
    "DeadlineExceeded",
    "Durably",
    "DurablyError",
    "Fence",
    "IdempotencyConflictError",
    "InvalidInput",
    "LeaseLostError",
    "NonDeterminismError",
    "NonRetryableError",
    "PayloadTooLarge",
    "Queue",
    "RetryPolicy",
    "Run",
    "RunFailedError",
    "RunHandle",
    "RunNotFound",
    "RunTerminalError",
    "SignalNotFound",
    "StepAttempt",
    "StepContext",
    "StepFailedError",
    "StepLimitExceeded",
    "StepTimeout",
    "SyncChildHandle",
    "SyncDurably",
    "SyncStepApi",
    "SyncWorkflowContext",
    "Worker",
    "Workflow",
    "WorkflowContext",
    "WorkflowMisuseError",
    "WorkflowNotFound",
    "WorkflowTimeoutError",
    "parse_duration",
]
