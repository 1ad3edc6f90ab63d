"""An event loop without I/O: the base of the loop workflow code runs on (`loop`).

`asyncio.AbstractEventLoop`'s methods all raise NotImplementedError at run time, but the
type stubs declare them abstract, so a subclass that leaves any out cannot be made without
`type: ignore[abstract]`. `NoIOLoop` declares those the workflow's loop has no use for
(running itself, sockets, pipes, subprocesses, signals, its own configuration), each
raising NotImplementedError as the base class's does; its I/O methods go through `_no_io`,
which the workflow's loop turns into a refusal (`WorkflowMisuseError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NoReturn, TypeVarTuple

_Ts = TypeVarTuple("_Ts")


class NoIOLoop(asyncio.AbstractEventLoop):
    """An `AbstractEventLoop` whose I/O and life-cycle methods are not implemented."""

    # ------------------------------------------------------------------ running, settings

    def run_forever(self) -> NoReturn:
        raise NotImplementedError

    def run_until_complete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError

    def stop(self) -> NoReturn:
        raise NotImplementedError

    async def shutdown_asyncgens(self) -> NoReturn:
        raise NotImplementedError

    async def shutdown_default_executor(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError

    def set_debug(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError

    def set_task_factory(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError

    def get_task_factory(self) -> NoReturn:
        raise NotImplementedError

    def set_default_executor(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError

    def set_exception_handler(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError

    def _no_io(self, what: str) -> NoReturn:
        """A method of I/O was called: not implemented here (a subclass may say more)."""
        raise NotImplementedError(what)

    # ------------------------------------------------------------------ network, pipes

    async def getaddrinfo(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("getaddrinfo")

    async def getnameinfo(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("getnameinfo")

    async def create_connection(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("create_connection")

    async def create_server(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("create_server")

    async def start_tls(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("start_tls")

    async def sendfile(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sendfile")

    async def create_datagram_endpoint(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("create_datagram_endpoint")

    async def connect_read_pipe(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("connect_read_pipe")

    async def connect_write_pipe(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("connect_write_pipe")

    async def subprocess_shell(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("subprocess_shell")

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("subprocess_exec")

    # ------------------------------------------------------------------ sockets, file descriptors

    async def sock_recv(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_recv")

    async def sock_recv_into(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_recv_into")

    async def sock_recvfrom(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_recvfrom")

    async def sock_recvfrom_into(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_recvfrom_into")

    async def sock_sendall(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_sendall")

    async def sock_sendto(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_sendto")

    async def sock_connect(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_connect")

    async def sock_accept(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_accept")

    async def sock_sendfile(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("sock_sendfile")

    # The stubs' callbacks are generic over their arguments: a plain `*args` does not match.
    def add_reader(self, fd: Any, callback: Callable[[*_Ts], Any], *args: *_Ts) -> NoReturn:
        self._no_io("add_reader")

    def remove_reader(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("remove_reader")

    def add_writer(self, fd: Any, callback: Callable[[*_Ts], Any], *args: *_Ts) -> NoReturn:
        self._no_io("add_writer")

    def remove_writer(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._no_io("remove_writer")

    def add_signal_handler(
        self, sig: int, callback: Callable[[*_Ts], object], *args: *_Ts
    ) -> NoReturn:
        raise NotImplementedError

    def remove_signal_handler(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError
