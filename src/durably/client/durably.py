"""`Durably`, the application: the async client API and registry (`app`), with the
same API for code without an event loop (`sync`)."""

from __future__ import annotations

from .app import App
from .sync import SyncDurably


class Durably(App):
    """A durably application: a database and the workflows registered on it.

    Args:
        url: `postgresql://…` or `sqlite:///path.db`; default `$DURABLY_DATABASE_URL`,
            else `sqlite:///durably.db`.
        schema: where the engine's tables live (PostgreSQL schema; SQLite table prefix).
        namespace: runs and signals are scoped to it: its workers execute its runs only.
            A queue is shared by the namespaces that declare it (one set of limits).
        migrate: apply migrations when first connecting.
        max_payload_bytes: the largest JSON input, output or signal data.
        pool_size: PostgreSQL connections in the pool.
        max_step_attempts: step attempts a run may make in all (then it fails).
        max_history_bytes: the size a run's recorded results may reach (its next step
            attempt then fails the run with `PayloadTooLarge`): every claim reads them whole,
            and the database's limit for that read is 1 GB.
        retention: keep finished runs this long; workers purge older ones periodically
            (one worker at a time). Default: kept for ever (`app.purge` deletes them).
        read_url: `postgresql://…` of a streaming replica of `url` (default
            `$DURABLY_READ_DATABASE_URL`): listing and inspection reads (`list_runs`,
            `get_run`, `list_steps`, ...) go there, except just after this client's own
            writes; everything else reads the primary (`client/reads.py`). PostgreSQL only.
        codec: encrypts payloads at rest (`FernetCodec(keys)`, or any `Codec`): inputs,
            outputs, step results, errors, signal and request data, events, stream values.
            Default: a `FernetCodec` of `$DURABLY_CODEC_KEYS` (comma-separated), if set.

    Example:
        ```python
        app = Durably("postgresql://localhost/app")

        @app.workflow(name="greet", version="v1")
        async def greet(ctx, name: str) -> str:
            return await ctx.step.run("hello", lambda: f"hello {name}")
        ```
    """

    @property
    def sync(self) -> SyncDurably:
        """The same client API for code without an event loop."""
        return SyncDurably(self)
