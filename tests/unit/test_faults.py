"""The fault-injection kit (tests/faults.py) itself: real psycopg connections through the
proxy to the real PostgreSQL, and the COMMIT finder on hand-made protocol streams."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time

import psycopg
import pytest

from tests.faults import FaultProxy, _Frontend
from tests.helpers import eventually_sync


def test_forwards_and_counts(fault_proxy: FaultProxy, pg_url: str) -> None:
    with psycopg.connect(fault_proxy.url_for(pg_url)) as conn:
        row = conn.execute("SELECT current_database()").fetchone()
        assert row == (pg_url.rpartition("/")[2],)
        assert (fault_proxy.connections, fault_proxy.active) == (1, 1)
    eventually_sync(lambda: fault_proxy.active == 0, what="the proxied connection to close")


def test_url_for_keeps_user_database_and_query(fault_proxy: FaultProxy) -> None:
    url = "postgresql://app:secret@127.0.0.1:5432/orders?application_name=w1"
    expected = f"postgresql://app:secret@127.0.0.1:{fault_proxy.port}/orders?application_name=w1"
    assert fault_proxy.url_for(url) == expected
    assert fault_proxy.url_for("postgresql://db.example:6000") == (
        f"postgresql://127.0.0.1:{fault_proxy.port}"
    )


def test_serves_other_processes(fault_proxy: FaultProxy, pg_url: str) -> None:
    code = (
        "import sys, psycopg\n"
        "with psycopg.connect(sys.argv[1]) as conn:\n"
        "    print(conn.execute('SELECT 7').fetchone()[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code, fault_proxy.url_for(pg_url)],
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert done.stdout.strip() == "7"
    assert fault_proxy.connections == 1


def test_delay_adds_latency_both_ways(fault_proxy: FaultProxy, pg_url: str) -> None:
    with psycopg.connect(fault_proxy.url_for(pg_url), autocommit=True) as conn:
        fault_proxy.delay(0.2)
        started = time.monotonic()
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert time.monotonic() - started >= 0.4  # the query's way there, the answer's back
        fault_proxy.delay(0)
        assert conn.execute("SELECT 2").fetchone() == (2,)


async def test_freeze_holds_everything_until_thaw(fault_proxy: FaultProxy, pg_url: str) -> None:
    url = fault_proxy.url_for(pg_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        fault_proxy.freeze()
        query = asyncio.ensure_future(conn.execute("SELECT 42"))
        connecting = asyncio.ensure_future(psycopg.AsyncConnection.connect(url))
        done, _ = await asyncio.wait({query, connecting}, timeout=0.5)
        assert not done  # neither answered nor failed: held
        assert (fault_proxy.connections, fault_proxy.active) == (1, 1)  # nothing closed
        fault_proxy.thaw()
        cursor = await asyncio.wait_for(query, timeout=10)
        assert await cursor.fetchone() == (42,)
        async with await asyncio.wait_for(connecting, timeout=10) as other:
            assert await (await other.execute("SELECT 1")).fetchone() == (1,)


async def test_cut_ends_a_frozen_query_with_an_error(fault_proxy: FaultProxy, pg_url: str) -> None:
    url = fault_proxy.url_for(pg_url)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        fault_proxy.freeze()
        query = asyncio.ensure_future(conn.execute("SELECT 1"))
        assert not (await asyncio.wait({query}, timeout=0.2))[0]
        fault_proxy.cut()
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(query, timeout=10)
        fault_proxy.thaw()


def test_cut_resets_both_sides_and_accepts_new_connections(
    fault_proxy: FaultProxy, pg_url: str
) -> None:
    url = fault_proxy.url_for(pg_url)
    with psycopg.connect(url, autocommit=True) as conn:
        pid = conn.info.backend_pid
        fault_proxy.cut()
        assert fault_proxy.active == 0
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with psycopg.connect(pg_url, autocommit=True) as direct:
        gone = "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s"
        eventually_sync(lambda: direct.execute(gone, [pid]).fetchone() == (True,),
                        what="the server to end the cut connection's backend")  # fmt: skip
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert fault_proxy.connections == 2


def test_cut_after_commit_commits_but_the_client_never_hears(
    fault_proxy: FaultProxy, pg_url: str
) -> None:
    url = fault_proxy.url_for(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as direct:
        direct.execute("CREATE TABLE t (x int)")
        fault_proxy.cut_after_commit()
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(psycopg.OperationalError):
                conn.commit()
        assert fault_proxy.commits_cut == 1
        eventually_sync(lambda: direct.execute("SELECT x FROM t").fetchall() == [(1,)],
                        what="the cut COMMIT's row")  # fmt: skip
        with psycopg.connect(url) as conn:  # armed for one COMMIT: the next goes through
            conn.execute("INSERT INTO t VALUES (2)")
            conn.commit()
        assert fault_proxy.commits_cut == 1
        assert direct.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_cut_after_commit_sent_by_the_extended_protocol(
    fault_proxy: FaultProxy, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as direct:
        direct.execute("CREATE TABLE t (x int)")
        fault_proxy.cut_after_commit()
        with psycopg.connect(fault_proxy.url_for(pg_url), autocommit=True) as conn:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t VALUES (%s)", [1])
            with pytest.raises(psycopg.OperationalError):
                conn.execute("COMMIT", prepare=True)  # Parse, Bind, Execute, Sync
        assert fault_proxy.commits_cut == 1
        eventually_sync(lambda: direct.execute("SELECT x FROM t").fetchall() == [(1,)],
                        what="the cut COMMIT's row")  # fmt: skip


def test_refuse_resets_new_connections_only(fault_proxy: FaultProxy, pg_url: str) -> None:
    url = fault_proxy.url_for(pg_url)
    with psycopg.connect(url, autocommit=True) as conn:
        fault_proxy.refuse()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=10)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        fault_proxy.refuse(False)
        with psycopg.connect(url) as again:
            assert again.execute("SELECT 2").fetchone() == (2,)
    assert fault_proxy.refused >= 1  # libpq may try twice (with TLS, then without)
    assert fault_proxy.connections == 2


def _message(kind: bytes, *fields: bytes) -> bytes:
    body = b"".join(fields)
    return kind + struct.pack("!I", len(body) + 4) + body


@pytest.mark.parametrize(
    ("query", "is_commit"),
    [(b"COMMIT", True), (b"  commit;", True), (b"END", True), (b"BEGIN; SELECT 1; COMMIT", True),
     (b"SELECT 'commit'", False), (b"INSERT INTO commits VALUES (1)", False), (b"ROLLBACK", False)],
)  # fmt: skip
def test_frontend_finds_where_a_commit_runs(query: bytes, is_commit: bool) -> None:
    params = b"user\0postgres\0\0"
    ssl_request = struct.pack("!II", 8, 80877103)
    startup = struct.pack("!II", 8 + len(params), 196608) + params
    bind_execute = _message(b"B", b"p1\0s1\0", b"\0" * 6) + _message(b"E", b"p1\0", b"\0" * 4)
    messages = [
        _message(b"Q", b"SELECT 1\0"),
        _message(b"P", b"s1\0", query, b"\0\0\0") + _message(b"S"),  # prepared, not run
        bind_execute + _message(b"S"),  # run
        bind_execute + _message(b"S"),  # run again, without a new Parse
        _message(b"P", b"s1\0SELECT 2\0\0\0") + bind_execute + _message(b"S"),  # s1 replaced
        _message(b"Q", query, b"\0"),  # run as a simple query
    ]
    frontend = _Frontend()
    forwarded, reply, commit = frontend.feed(ssl_request)
    assert (forwarded, reply, commit) == (b"", b"N", False)  # SSLRequest answered here
    assert frontend.feed(startup) == (startup, b"", False)
    ran = []
    for message in messages:
        for size in (1, 3, len(message)):  # each message byte by byte, in pieces, whole
            pieces = [message[i : i + size] for i in range(0, len(message), size)]
            results = [frontend.feed(piece) for piece in pieces]
            assert b"".join(data for data, _, _ in results) == message
            ran.append(any(commit for _, _, commit in results))
    assert ran == [False] * 6 + [is_commit] * 6 + [False] * 3 + [is_commit] * 3
