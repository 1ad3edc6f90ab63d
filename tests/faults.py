"""Network faults between database clients and PostgreSQL: a TCP proxy that can delay,
freeze, cut, refuse, cut a connection right after its client sends COMMIT, and hold the
replies of the one connection a given answer went to.

The proxy listens on a free port of 127.0.0.1 and runs one selector loop in a thread of its
own, so it serves in-process async tests and worker subprocesses alike. A control call takes
effect in that loop before it returns: once `freeze()` returns, nothing more moves.

    with FaultProxy("127.0.0.1", 5432) as proxy:
        url = proxy.url_for("postgresql://postgres@127.0.0.1:5432/app")
        proxy.cut_after_commit()    # the next COMMIT commits, but its client never hears so

The proxy answers SSLRequest and GSSENCRequest itself with "N", so connections stay in plain
text whatever `sslmode` allows (`require` fails): reading the protocol is how it finds COMMIT.
"""

from __future__ import annotations

import contextlib
import queue
import re
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

_NEGOTIATIONS = (80877103, 80877104)  # SSLRequest, GSSENCRequest
_COMMIT = re.compile(rb"(?:^|;)\s*(?:COMMIT|END)\b", re.IGNORECASE)
_KEEP = {b"Q": 1 << 20, b"P": 1 << 20, b"B": 256, b"E": 256}  # message bodies read, how much
_MAX_QUEUED = 1 << 20  # bytes per direction before the proxy stops reading from the sender


class _Messages:
    """Frames one direction of a connection's typed messages (after the startup): each
    message completed by the bytes fed, as its type and the first `keep[type]` bytes of
    its body."""

    def __init__(self, keep: dict[bytes, int]) -> None:
        self.keep = keep
        self.head = bytearray()  # the 5-byte header (type, length) of the current message
        self.left = 0  # its body bytes still to come
        self.body = bytearray()

    def feed(self, data: bytes | memoryview) -> list[tuple[bytes, bytes]]:
        done, view, i = [], memoryview(data), 0
        while i < len(view):
            if len(self.head) < 5:
                take = min(5 - len(self.head), len(view) - i)
                self.head += view[i : i + take]
                i += take
                if len(self.head) < 5:
                    break
                self.left = max(int.from_bytes(self.head[1:5]) - 4, 0)
                self.body.clear()
            take = min(self.left, len(view) - i)
            if len(self.body) < self.keep.get(bytes(self.head[:1]), 0):
                self.body += view[i : i + take]
            self.left, i = self.left - take, i + take
            if not self.left:
                done.append((bytes(self.head[:1]), bytes(self.body)))
                self.head.clear()
        return done


class _Frontend:
    """Frames the client-to-server stream into protocol messages to find where COMMITs run.

    A simple Query runs a COMMIT if one of its statements starts with COMMIT (or END); in the
    extended protocol it runs at the Execute of a portal bound to a statement parsed from one
    (Parse only prepares it, and psycopg reuses prepared statements without a new Parse).
    """

    def __init__(self) -> None:
        self.startup: bytearray | None = bytearray()  # untyped messages, until StartupMessage
        self.messages = _Messages(_KEEP)
        self.statements: set[bytes] = set()  # prepared statements that are a COMMIT
        self.portals: set[bytes] = set()  # portals bound to one of them

    def feed(self, data: bytes) -> tuple[bytes, bytes, bool]:
        """Bytes to forward, a reply for the client, and whether a COMMIT ran in them."""
        forward = reply = b""
        while self.startup is not None:  # untyped messages: length, then a request code
            self.startup += data
            size = int.from_bytes(self.startup[:4])
            if len(self.startup) < max(size, 8):
                return forward, reply, False
            message, data = bytes(self.startup[:size]), bytes(self.startup[size:])
            if int.from_bytes(message[4:8]) in _NEGOTIATIONS:
                reply, self.startup = reply + b"N", bytearray()
            else:  # StartupMessage (or CancelRequest): typed messages follow
                forward, self.startup = message, None
        commit = False
        for kind, body in self.messages.feed(data):
            commit |= self._ran_commit(kind, body)
        return forward + bytes(data), reply, commit

    def _ran_commit(self, kind: bytes, body: bytes) -> bool:
        first, second, *_ = [*body.split(b"\0", 2), b"", b""]
        if kind == b"P":  # Parse: statement name, query
            (self.statements.add if _COMMIT.search(second) else self.statements.discard)(first)
        elif kind == b"B":  # Bind: portal name, statement name
            (self.portals.add if second in self.statements else self.portals.discard)(first)
        return (kind == b"Q" and _COMMIT.search(first) is not None) or (
            kind == b"E" and first in self.portals
        )


class _Flow:
    """One direction of a connection: chunks read from `src`, each due to `dst` at a time."""

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.chunks: deque[tuple[float, bytes, bool]] = deque()  # due, data, cut client after
        self.queued = 0
        self.eof = self.shut = False  # end of input read from src; passed on to dst

    def push(self, due: float, data: bytes, cut_client: bool = False) -> None:
        if data:
            self.chunks.append((due, data, cut_client))
            self.queued += len(data)


class _Backend:
    """Frames the server-to-client stream to read the notifications (NotificationResponse,
    type A: process id, channel, payload) it carries."""

    def __init__(self) -> None:
        self.messages = _Messages({b"A": 1 << 20})

    def feed(self, data: bytes) -> list[str]:
        """The payloads of the notifications completed by `data`."""
        return [body[4:].split(b"\0", 2)[1].decode()
                for kind, body in self.messages.feed(data) if kind == b"A"]  # fmt: skip


class _Pair:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.up, self.down = _Flow(client, server), _Flow(server, client)
        self.frontend = _Frontend()
        self.backend = _Backend()
        self.client_cut = False  # after a COMMIT: the client is gone, the server drained
        self.held = False  # its replies are held (see `FaultProxy.hold_replies`)
        self.tail = b""  # the last bytes the server sent, for a match across two chunks


def _unread(server_port: int, client_port: int) -> int:
    """Bytes in the receive queue of this machine's TCP socket from `client_port` to
    `server_port` (on 127.0.0.1): received and not read yet by the program."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, remote, queues = fields[1], fields[2], fields[4]
                if (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)) == (
                    client_port, server_port,
                ):  # fmt: skip
                    return int(queues.split(":")[1], 16)
    return 0


def _reset(sock: socket.socket) -> None:
    """Close with an RST rather than a FIN (SO_LINGER on, timeout 0)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy:
    """A TCP proxy to `target_host:target_port` that injects network faults on demand.

    Args:
        target_host: where PostgreSQL listens.
        target_port: its port.

    Counters: `connections` (proxied so far), `active` (open now), `refused`, `commits_cut`;
    `notifications`: the payloads of the notifications the server sent its clients.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = self.refused = self.commits_cut = 0
        self._delay, self._frozen, self._refusing, self._armed = 0.0, False, False, 0
        self._hold: bytes | None = None  # see `hold_replies`
        self.notifications: list[str] = []
        self._pairs: set[_Pair] = set()
        self._selector = selectors.DefaultSelector()
        self._listener = socket.socket()
        self._wake_r, self._wake_w = socket.socketpair()
        self._calls: queue.SimpleQueue[tuple[Callable[[], object], threading.Event]]
        self._calls = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._stopping = False
        self._error: BaseException | None = None

    def start(self) -> FaultProxy:
        """Listen on a free port of 127.0.0.1 and start forwarding."""
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        for sock in (self._listener, self._wake_r):
            sock.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Reset every connection, stop listening, end the thread; raise if it had failed."""
        if self._thread.is_alive():
            self._stopping = True
            self._wake_w.send(b"x")
            self._thread.join()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()
        if self._error is not None:
            raise RuntimeError("the fault proxy's loop failed") from self._error

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def active(self) -> int:
        """Connections open now (one cut after its COMMIT, until the server has closed it)."""
        return len(self._pairs)

    def url_for(self, base_url: str) -> str:
        """`base_url` through the proxy: host and port replaced; user, database, query kept."""
        parts = urlsplit(base_url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def delay(self, seconds: float) -> None:
        """Forward every chunk read from now on `seconds` late, both ways; 0 removes it."""
        self._call(lambda: setattr(self, "_delay", max(seconds, 0.0)))

    def freeze(self) -> None:
        """Forward nothing either way, accept nothing, close nothing: a silent network.

        What is sent meanwhile is held (in socket buffers), not dropped; see `thaw`.
        """
        self._call(lambda: setattr(self, "_frozen", True))

    def thaw(self) -> None:
        """Forward again, what was held first, like a network partition that heals."""
        self._call(lambda: setattr(self, "_frozen", False))

    def cut(self) -> None:
        """Reset every open connection, both sides; new connections are still accepted."""
        self._call(self._cut_all)

    def cut_after_commit(self, count: int = 1) -> None:
        """Cut each of the next `count` connections that run a COMMIT (0 disarms).

        The client's chunk holding the COMMIT is forwarded, then the client is reset before
        any reply can reach it; the server reads the COMMIT, then end of input. So the
        transaction commits, and the client gets an error from its commit.
        """
        self._call(lambda: setattr(self, "_armed", count))

    def refuse(self, refusing: bool = True) -> None:
        """While `refusing`, reset each new connection as soon as it is accepted."""
        self._call(lambda: setattr(self, "_refusing", refusing))

    def hold_replies(self, pattern: bytes) -> None:
        """Hold what the server sends on the next connection whose server sends `pattern`
        (that answer included), from then on until `release`: its statements still reach
        the server and run, and their client hears nothing. The other connections go on."""
        self._call(lambda: setattr(self, "_hold", pattern))

    def release(self) -> None:
        """Forward what was held, and hold nothing more."""

        def release() -> None:
            self._hold = None
            for pair in self._pairs:
                pair.held = False

        self._call(release)

    @property
    def holding(self) -> bool:
        """Some connection's replies are held."""
        return any(pair.held for pair in list(self._pairs))

    def delivered(self) -> bool:
        """Every byte for the clients of connections not held has been read by them: sent
        on, and no longer in their sockets' receive queues (this machine's /proc/net/tcp)."""
        result: list[bool] = []

        def check() -> None:
            pairs = [p for p in self._pairs if not p.held and not p.client_cut]
            if any(p.down.chunks for p in pairs):
                result.append(False)
                return
            peers = {p.client.getpeername()[1] for p in pairs if p.client.fileno() >= 0}
            result.append(not any(_unread(self.port, peer) for peer in peers))

        self._call(check)
        return result[0]

    def _call(self, fn: Callable[[], object]) -> None:
        if self._error is not None or not self._thread.is_alive():
            fn()  # not started, stopped, or failed (which `stop` reports)
            return
        done = threading.Event()
        self._calls.put((fn, done))
        self._wake_w.send(b"x")
        if not done.wait(10):
            raise RuntimeError("the fault proxy's loop did not answer")

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._watch()
                for key, mask in self._selector.select(self._timeout()):
                    self._on_ready(key, mask)
                while not self._calls.empty():
                    fn, done = self._calls.get()
                    fn()
                    done.set()
                for pair in [] if self._frozen else list(self._pairs):
                    self._pump(pair)
        except BaseException as exc:
            self._error = exc
        finally:
            self._cut_all()

    def _cut_all(self) -> None:
        for pair in list(self._pairs):
            self._drop(pair)

    def _watch(self) -> None:
        """Tell the selector what each socket waits for now (frozen: nothing)."""
        wanted: dict[socket.socket, tuple[int, _Pair | None]] = {
            self._listener: (0 if self._frozen else selectors.EVENT_READ, None)
        }
        now = time.monotonic()
        for pair in self._pairs:
            masks = {pair.client: 0, pair.server: 0}
            for flow in [] if self._frozen else (pair.up, pair.down):
                if not flow.eof and flow.queued < _MAX_QUEUED:
                    masks[flow.src] |= selectors.EVENT_READ
                if flow is pair.down and pair.held:
                    continue
                if flow.chunks and flow.chunks[0][0] <= now:
                    masks[flow.dst] |= selectors.EVENT_WRITE
            wanted.update((s, (m, pair)) for s, m in masks.items() if s.fileno() >= 0)
        for sock, (mask, pair_) in wanted.items():
            key = self._selector.get_map().get(sock)
            if key is None and mask:
                self._selector.register(sock, mask, pair_)
            elif key is not None and not mask:
                self._selector.unregister(sock)
            elif key is not None and key.events != mask:
                self._selector.modify(sock, mask, pair_)

    def _timeout(self) -> float | None:
        """Until the next chunk falls due (chunks already due wait for a writable socket)."""
        now = time.monotonic()
        heads = [f.chunks[0][0] for p in self._pairs for f in (p.up, p.down)
                 if f.chunks and not (f is p.down and p.held)]  # fmt: skip
        later = [due - now for due in heads if due > now]
        return None if self._frozen or not later else min(later)

    def _on_ready(self, key: selectors.SelectorKey, mask: int) -> None:
        pair: _Pair | None = key.data
        if key.fileobj is self._wake_r:
            self._wake_r.recv(4096)
        elif key.fileobj is self._listener:
            self._accept()
        elif pair is not None and mask & selectors.EVENT_READ:
            try:
                self._read(pair, pair.up if key.fileobj is pair.client else pair.down)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop(pair)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if self._refusing:
            self.refused += 1
            _reset(client)
            return
        try:  # in the loop's thread: fine for a server on this machine, which answers at once
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            _reset(client)  # as a server that is down would
            return
        for sock in (client, server):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections += 1
        self._pairs.add(_Pair(client, server))

    def _read(self, pair: _Pair, flow: _Flow) -> None:
        data, due = flow.src.recv(65536), time.monotonic() + self._delay
        if not data:
            flow.eof = True
        elif flow is pair.down:
            self.notifications += pair.backend.feed(data)
            if self._hold is not None and self._hold in pair.tail + data:
                pair.held, self._hold = True, None
            pair.tail = (pair.tail + data)[-len(self._hold) :] if self._hold else b""
            flow.push(due, b"" if pair.client_cut else data)  # cut: nobody hears the answer
        else:
            data, reply, commit = pair.frontend.feed(data)
            cut_client = commit and self._armed > 0
            self._armed -= cut_client
            flow.eof |= cut_client  # read nothing more from this client
            pair.down.push(due, reply)
            flow.push(due, data, cut_client)

    def _pump(self, pair: _Pair) -> None:
        """Send what is due, pass end of input on, and close the pair once both ends did."""
        for flow in (pair.up, pair.down):
            if flow is pair.down and pair.held:
                continue
            try:
                while flow.chunks and flow.chunks[0][0] <= time.monotonic():
                    due, data, cut_client = flow.chunks[0]
                    sent = flow.dst.send(data)
                    flow.queued -= sent
                    if sent < len(data):
                        flow.chunks[0] = (due, data[sent:], cut_client)
                        break
                    flow.chunks.popleft()
                    if cut_client:  # the server has the COMMIT; the client must not hear back
                        self.commits_cut += 1
                        pair.client_cut = True
                        self._forget(pair.client)
                        _reset(pair.client)
                        pair.down.chunks.clear()
                if flow.eof and not flow.chunks and not flow.shut and flow.dst.fileno() >= 0:
                    flow.dst.shutdown(socket.SHUT_WR)
                    flow.shut = True
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop(pair)
                return
        if (pair.up.shut and pair.down.shut) or (pair.client_cut and pair.down.eof):
            self._drop(pair, reset=False)

    def _drop(self, pair: _Pair, reset: bool = True) -> None:
        for sock in (pair.client, pair.server):
            self._forget(sock)
            if reset:
                _reset(sock)
            else:
                sock.close()
        self._pairs.discard(pair)

    def _forget(self, sock: socket.socket) -> None:
        if sock.fileno() >= 0 and sock in self._selector.get_map():
            self._selector.unregister(sock)
