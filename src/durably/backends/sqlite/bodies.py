"""A `step.transaction` body on SQLite: the engine's connection lent to it, and the writes
that keep the process's claims alive while it holds the file's write lock.

A body's transaction holds the process's one connection, and with it the file's write lock,
for as long as the body runs: longer than a lease, at times. No other process can write
meanwhile, so none can claim a run of ours. But this worker's own heartbeats would wait for
the connection: the leases would run out on the worker's clock (which halts every run it
holds, the body's own included) and in the database (where another process would claim
them as soon as the lock is let go). So, while a body holds the lock, the writes that keep
the process's claims alive (`KEEPALIVE`) do not wait for it (`Hold`). Each is answered at
once (a heartbeat by a read on a connection of its own, which sees what was committed
before the lock was taken: the leases live then are ours until it is let go) and written
in the body's transaction before the lock is let go: before the engine's next statement
there (the step's record finds its lease renewed), and again after the body's own writes
are rolled back (to a savepoint) if it failed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from typing import Any, Literal

# The writes that keep a process's claims alive, and what each is written as in a hold: a
# heartbeat renews the leases that were live when the lock was taken (`renew_held`).
KEEPALIVE = {
    "heartbeat": "renew_held",
    "worker_seen": "worker_seen",
    "renew_queues": "renew_queues",
}
SAVEPOINT = "durably_body"


class EngineConnection(sqlite3.Connection):
    """The engine's connection: while a `step.transaction` body holds it (`lend`), it
    refuses to end the step's transaction or itself. sqlite3 would commit the body's
    writes at once, without the step's record (a failed attempt kept them), roll back
    what the engine wrote before it, or close the connection every run of the process
    uses. psycopg refuses commit() and rollback() inside a `transaction()` block alike.

    `with conn:` commits in C, past `commit()`, and so does SQL of the body's own (COMMIT,
    ROLLBACK, END, or RELEASE of the engine's savepoint): an authorizer denies those while
    the connection is lent (setting it expires the statements prepared before, so a cached
    one is prepared, and authorized, again), and `refused` says what it denied."""

    lent = False
    refused: str | None = None

    def lend(self) -> None:
        self.lent, self.refused = True, None
        self.set_authorizer(self._authorize)

    def take_back(self) -> None:
        self.lent = False
        self.set_authorizer(None)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, *_: Any) -> int:
        ends = action == sqlite3.SQLITE_TRANSACTION or (
            action == sqlite3.SQLITE_SAVEPOINT and arg2 == SAVEPOINT and arg1 != "BEGIN"
        )
        if not (ends and self.lent):
            return sqlite3.SQLITE_OK
        savepoint = "" if action == sqlite3.SQLITE_TRANSACTION else " of the engine's savepoint"
        self.refused = f"run {arg1}{savepoint}"
        return sqlite3.SQLITE_DENY

    def _refuse(self, what: str) -> None:
        if self.lent:
            raise refusal(what)

    def __enter__(self) -> EngineConnection:
        self._refuse("use `with conn:` (it commits)")
        return super().__enter__()

    def __exit__(self, *exc: object) -> Literal[False]:
        self._refuse("use `with conn:` (it commits)")
        return super().__exit__(*exc)  # type: ignore[arg-type]

    def commit(self) -> None:
        self._refuse("commit() its connection")
        super().commit()

    def rollback(self) -> None:
        self._refuse("rollback() its connection")
        super().rollback()

    def close(self) -> None:
        self._refuse("close() its connection")
        super().close()


def refusal(what: str) -> sqlite3.ProgrammingError:
    return sqlite3.ProgrammingError(
        f"a step.transaction body cannot {what}: the engine commits the body's writes with "
        "the step's record, and rolls them back if the body raises"
    )


def check_returned(conn: sqlite3.Connection, error: Exception | None = None) -> None:
    """After a body lent `conn` returned (or raised `error`): fail it, as its own error, if
    it tried to end the step's transaction (even if it went on after the refusal), or
    ended it by a way not refused (an authorizer of its own in place of the engine's)."""
    if not isinstance(conn, EngineConnection) or not conn.lent:
        return
    if conn.refused is not None:
        raise refusal(conn.refused) from error
    if not conn.in_transaction:
        raise refusal("end the step's transaction") from error


class Hold:
    """A body's transaction, holding the write lock since `since` (the database's clock),
    and the writes deferred to it (see the module docstring). Deferred on the event loop's
    thread; written on the connection's, where the hold ends behind the body (one thread,
    in order): a body cancelled while it runs there still holds the lock until it returns,
    and the deferred writes go on meanwhile."""

    def __init__(self, since: float, queries: dict[str, list[str]]) -> None:
        self.since = since
        self._queries = queries
        self._writes: list[tuple[list[str], dict[str, Any]]] = []
        self._written = 0
        self._closing = threading.Lock()
        self._closed = False

    def defer(self, query: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """Write `query` (one of `KEEPALIVE`) before the lock is let go; its arguments, or
        None once the hold is letting go (then it waits for the connection, as any write)."""
        args = {**args, "since": self.since}
        with self._closing:
            if self._closed:
                return None
            self._writes.append((self._queries[KEEPALIVE[query]], args))
        return args

    def flush(self, conn: sqlite3.Connection) -> None:
        """Write what was deferred since the last flush."""
        while self._written < len(self._writes):
            statements, args = self._writes[self._written]
            for statement in statements:
                conn.execute(statement, args)
            self._written += 1

    def let_go(self, conn: EngineConnection, failed: bool) -> None:
        """Once the body is done: commit its writes, or roll them back if it `failed`, with
        the deferred writes either way."""
        conn.take_back()
        with self._closing:  # whatever was deferred until now is written below
            self._closed = True
        try:
            if conn.in_transaction:  # else the body ended it (see `check_returned`)
                if failed:
                    conn.execute(f"ROLLBACK TO {SAVEPOINT}")
                    self._written = 0  # the savepoint took those away with the body's writes
                conn.execute(f"RELEASE {SAVEPOINT}")
            self.flush(conn)
            conn.commit()
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
            raise
