"""SQLite through the standard library: one file, WAL, IMMEDIATE transactions.

One connection per process, used from one thread (a `step.transaction` body that is a
plain function runs there too); an asyncio lock gives it to one transaction at a time.
While a body's transaction holds it, and the file's write lock, the writes that keep this
process's claims alive do not wait for it (bodies.py). Other processes on the same file
are kept apart by SQLite's own write lock (BEGIN IMMEDIATE with a busy timeout). Wake-ups
between processes come from `PRAGMA data_version`, which changes when another connection
commits: reading it touches only shared memory, so checking it often costs next to nothing.

Commits are durable when they return (`synchronous=FULL`: the WAL is synced at each
commit; NORMAL would lose the last commits on a power cut, and with them step records
whose effects happened). Opened read-only (`sqlite:///file.db?mode=ro`), nothing is
created or migrated: the file must exist, with durably's tables.

Errors: an OperationalError that is about the file (busy, locked, I/O, cannot open,
read-only, full, corrupt) is `DatabaseUnavailable`; one about the SQL (SQLITE_ERROR: no
such table, a syntax error) and every other sqlite3 error are raised as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ...core.clock import Clock
from ...core.errors import ConfigurationError, DatabaseUnavailable
from .. import _queries
from .._base import LISTENING, Fetched, Row, Sent
from .bodies import KEEPALIVE, SAVEPOINT, EngineConnection, Hold, check_returned

_PACKAGE = __package__ or "durably.backends.sqlite"
_WAKE_POLL_S = 0.02

T = TypeVar("T")


def _param(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return value


def _params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: _param(v) for k, v in params.items()}


def _row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Row:
    row = {}
    for (name, *_), value in zip(cursor.description, values, strict=True):
        if value is not None and (name.endswith("_at") or name == "db_now"):
            value = datetime.fromtimestamp(value, UTC)
        row[name] = value
    return row


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch a new database file to WAL (a no-op once it is). Switching needs the file to
    itself and does not wait on the busy timeout, so processes that open a fresh file at
    the same moment retry here for a while."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED")
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class SqliteTx:
    """A transaction on one sqlite3 connection (ours, or the caller's); a body's holds
    the write lock (`hold`) and runs a plain function on the connection's own thread
    (`body`), so that the event loop goes on meanwhile."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        queries: dict[str, list[str]],
        run: Callable[[Callable[[], Any]], Awaitable[Any]],
        hold: Hold | None = None,
        body: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    ) -> None:
        self._conn = conn
        self._queries = queries
        self._run = run
        self._hold = hold
        self._body = body

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        statements = self._queries[query]
        args = _params(params)
        conn, hold = self._conn, self._hold

        def execute() -> list[Row]:
            if hold is not None:
                hold.flush(conn)
            return _execute(conn, statements, args)

        return list(await self._run(execute))

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            if self._body is None or inspect.iscoroutinefunction(fn):
                result = fn(self._conn, *args)
            else:  # its own errors as they are: not the engine's (see `classify`)
                result = await self._body(functools.partial(fn, self._conn, *args))
            result = await result if inspect.isawaitable(result) else result
        except Exception as exc:
            check_returned(self._conn, exc)
            raise
        check_returned(self._conn)
        return result

    async def send(self, query: str, **params: Any) -> Sent:
        return Fetched(await self.fetch(query, **params))


def _execute(conn: sqlite3.Connection, statements: list[str], args: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for statement in statements:
        cur = conn.execute(statement, args)
        if cur.description is not None:
            cur.row_factory = _row
            rows = cur.fetchall()
    return rows


def _roll_back_quietly(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.rollback()


def classify(exc: sqlite3.Error) -> Exception:
    """The error the engine sees for a sqlite3 error (see the module docstring)."""
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(exc, sqlite3.OperationalError) and name != "SQLITE_ERROR":
        return DatabaseUnavailable(f"SQLite error: {exc}")
    return exc


class SqliteConnector:
    """Runs durably's named queries on a SQLite file."""

    dialect = "sqlite"

    def __init__(self, path: str, schema: str, clock: Clock, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.schema = schema
        self._clock = clock
        self._conn: EngineConnection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = asyncio.Lock()
        self._queries = {
            name: [s.replace("{schema}", schema) for s in statements]
            for name, statements in _queries.load(_PACKAGE, "named").items()
        }
        self._listeners: list[Callable[[str], None]] = []
        self._thread_ids: set[int] = set()
        self._hold: Hold | None = None  # a body's transaction holds the write lock
        self._reader: sqlite3.Connection | None = None  # reads while it does (bodies.py)
        self._reads: ThreadPoolExecutor | None = None

    def _connect(self) -> EngineConnection:
        target = self.path
        if self.read_only:
            target = f"file:{quote(self.path)}?mode=ro"
        elif self.path not in (":memory:", "") and not self.path.startswith("file:"):
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file where a folder goes, no permission
                raise ConfigurationError(
                    f"SQLite database {self.path!r}: its folder cannot be made: {exc}"
                ) from exc
        conn = sqlite3.connect(target, uri=self.read_only, isolation_level=None,
                               check_same_thread=False, timeout=30.0,
                               factory=EngineConnection)  # fmt: skip
        self.prepare(conn)
        if not self.read_only:
            _use_wal(conn)
            conn.execute("PRAGMA synchronous=FULL")
        return conn

    def prepare(self, conn: sqlite3.Connection) -> None:
        """Make a connection (ours or the caller's) able to run durably's queries."""
        conn.create_function("now", 0, self._clock.time)
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA foreign_keys=ON")

    async def open(self) -> None:
        if self._conn is None:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="durably-sqlite")
            loop = asyncio.get_running_loop()
            try:
                self._conn = await loop.run_in_executor(self._executor, self._connect)
            except sqlite3.Error as exc:
                how = " for reading (it must exist)" if self.read_only else ""
                raise DatabaseUnavailable(
                    f"cannot open SQLite file {self.path!r}{how}: {exc}"
                ) from exc

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.lent = False  # closed under a body still running (it fails, as it did)
            await self._run(conn.close)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._reads is not None:
            reader, self._reader = self._reader, None
            if reader is not None:
                self._reads.submit(reader.close)
            self._reads.shutdown(wait=True)
            self._reads = None

    async def _run(self, fn: Callable[[], Any]) -> Any:
        assert self._executor is not None
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except sqlite3.Error as exc:
            translated = classify(exc)
            if translated is exc:
                raise
            raise translated from exc

    async def migrate(self) -> list[str]:
        await self.open()
        if self.read_only:
            await self._check_migrated()
            return []
        async with self.transaction() as tx:
            conn = tx.connection

            def apply() -> list[str]:
                conn.execute(
                    f'CREATE TABLE IF NOT EXISTS "{self.schema}_migrations" '
                    "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL)"
                )
                done = {
                    r[0] for r in conn.execute(f'SELECT version FROM "{self.schema}_migrations"')
                }
                applied = []
                for version, name, text in _queries.migrations(_PACKAGE):
                    if version in done:
                        continue
                    for statement in text.replace("{schema}", self.schema).split(";\n"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(
                        f'INSERT INTO "{self.schema}_migrations" VALUES (?, ?, now())',
                        (version, name),
                    )
                    applied.append(name)
                return applied

            result: list[str] = await self._run(apply)
            return result

    async def _check_migrated(self) -> None:
        assert self._conn is not None
        conn, table = self._conn, f"{self.schema}_migrations"
        found = await self._run(lambda: conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone())  # fmt: skip
        if found is None:
            raise ConfigurationError(
                f"{self.path} has no durably tables (schema {self.schema!r}): nothing was "
                "ever started there, or it is another database"
            )

    @contextlib.asynccontextmanager
    async def transaction(
        self, external: Any = None, *, pipelined: bool = True
    ) -> AsyncIterator[SqliteTx]:
        if external is not None:
            self.prepare(external)

            async def inline(fn: Callable[[], Any]) -> Any:
                return fn()

            yield SqliteTx(external, self._queries, inline)
            return
        await self.open()
        assert self._conn is not None
        conn = self._conn
        async with self._lock:
            try:
                await self._run(lambda: conn.execute("BEGIN IMMEDIATE"))
            except BaseException:
                # Cancelled while the BEGIN waits for the write lock, it still runs in the
                # thread: a rollback queued behind it (one thread, in order) ends what it
                # begins, before anything queued later. Not awaited: the BEGIN may wait
                # for the lock up to the busy timeout.
                assert self._executor is not None
                self._executor.submit(_roll_back_quietly, conn)
                raise
            hold: Hold | None = None
            try:
                if not pipelined:  # a body's (see Connector.transaction, and bodies.py)
                    await self._run(lambda: conn.execute(f"SAVEPOINT {SAVEPOINT}"))
                    hold = self._hold = Hold(self._clock.time(), self._queries)
                    conn.lend()
                yield SqliteTx(conn, self._queries, self._run, hold, self._in_thread)
            except BaseException:
                await self._end(conn, hold, failed=True)
                raise
            await self._end(conn, hold, failed=False)

    async def _end(self, conn: EngineConnection, hold: Hold | None, failed: bool) -> None:
        """Commit or roll back; a body's transaction lets go of its hold (bodies.py), on
        the connection's thread, behind the body if it still runs there."""
        if hold is None:
            await self._run(conn.rollback if failed else conn.commit)
            return
        try:
            await self._run(lambda: hold.let_go(conn, failed))
        finally:
            self._hold = None

    def _in_thread(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        assert self._executor is not None
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _while_held(self, args: dict[str, Any], query: str) -> list[Row]:
        """A write that keeps our claims alive, deferred to a body's hold (before the read,
        which yields: the hold may end meanwhile), answered."""
        if query != "heartbeat":
            return []  # their callers read nothing back
        if self._reads is None:
            self._reads = ThreadPoolExecutor(1, thread_name_prefix="durably-sqlite-read")
        loop = asyncio.get_running_loop()
        try:
            return list(await loop.run_in_executor(self._reads, self._read_held, args))
        except sqlite3.Error as exc:
            raise classify(exc) from exc

    def _read_held(self, args: dict[str, Any]) -> list[Row]:
        if self._reader is None:
            self._reader = sqlite3.connect(self.path, isolation_level=None,
                                           check_same_thread=False, timeout=30.0)  # fmt: skip
            self.prepare(self._reader)
        return _execute(self._reader, self._queries["held_since"], args)

    async def fetch(self, query: str, **params: Any) -> list[Row]:
        hold = self._hold
        if hold is not None and query in KEEPALIVE and self.path not in (":memory:", ""):
            deferred = hold.defer(query, _params(params))
            if deferred is not None:
                return await self._while_held(deferred, query)
        statements = self._queries[query]
        if any(not s.lstrip().upper().startswith("SELECT") for s in statements):
            async with self.transaction() as tx:
                return await tx.fetch(query, **params)
        # A read takes no write lock: under WAL it neither waits for writers nor blocks
        # them (a worker frozen in the middle of a read holds up nobody).
        await self.open()
        assert self._conn is not None
        conn = self._conn
        args = _params(params)
        async with self._lock:
            return list(await self._run(lambda: _execute(conn, statements, args)))

    async def retrying(self, work: Callable[[], Awaitable[T]], what: str) -> T:
        """`work`, once: one writer at a time (IMMEDIATE) never deadlocks."""
        return await work()

    async def listen(self, on_message: Callable[[str], None]) -> Callable[[], Awaitable[None]]:
        self._listeners.append(on_message)
        stop_event = threading.Event()
        task = asyncio.create_task(self._watch(on_message, stop_event), name="durably-watch")

        async def stop() -> None:
            stop_event.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._listeners.remove(on_message)

        return stop

    async def _watch(self, on_message: Callable[[str], None], stop: threading.Event) -> None:
        with self._watch_connection() as watcher:
            last = watcher.execute("PRAGMA data_version").fetchone()[0]
            on_message(LISTENING)  # a commit from now on changes `last`
            while not stop.is_set():
                await asyncio.sleep(_WAKE_POLL_S)
                version = watcher.execute("PRAGMA data_version").fetchone()[0]
                if version != last:
                    last = version
                    on_message("changed")

    @contextlib.contextmanager
    def _watch_connection(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            yield conn
        finally:
            conn.close()

    def notify_local(self, message: str) -> None:
        for listener in list(self._listeners):
            listener(message)
