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

from .client.durably import Durably
from .client.handle import RunHandle
from .client.sync import SyncDurably
from .client.workflow import Workflow
from .core.durations import parse_duration
from .core.errors import (
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
    RequestRejected,
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
from .core.fernet import FernetCodec
from .core.retry import RetryPolicy
from .core.sealing import Codec
from .store.models import Run, StepAttempt
from .worker.worker import Worker
from .workflow.context import WorkflowContext
from .workflow.continues import ContinueAsNew
from .workflow.queue import Queue
from .workflow.requests import Request
from .workflow.stepcontext import Fence, StepContext
from .workflow.steps import ChildHandle
from .workflow.syncsteps import SyncChildHandle, SyncStepApi, SyncWorkflowContext

__all__ = [
    "ChildHandle",
    "ChildWorkflowError",
    "Codec",
    "ConfigurationError",
    "ContinueAsNew",
    "DatabaseUnavailable",
    "DeadlineExceeded",
    "Durably",
    "DurablyError",
    "Fence",
    "FernetCodec",
    "IdempotencyConflictError",
    "InvalidInput",
    "LeaseLostError",
    "NonDeterminismError",
    "NonRetryableError",
    "PayloadTooLarge",
    "Queue",
    "Request",
    "RequestRejected",
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
