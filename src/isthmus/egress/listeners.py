"""The set of listening sockets a forwarder or gateway keeps, reconciled to what its rules want.

`update(wanted)` opens what is new and closes what is gone (its relayed flows too: a rule removed
stops its traffic); `close()` closes everything and aborts every flow — a gateway that stops leading
must not keep relaying from addresses it no longer owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from isthmus.egress.relay import READ_SIZE, OpenRelay, UdpFlows
from isthmus.egress.splice import Pipe

log = logging.getLogger(__name__)


class ListenKey(NamedTuple):
    protocol: str
    ip: str
    port: int


TcpHandler = Callable[[ListenKey, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
PipeHandler = Callable[[ListenKey, Pipe], None]
"""Called as a connection is accepted on a pipe listener (the hot path: no task, no streams)."""
UdpOpener = Callable[[ListenKey, tuple[str, int]], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]]


class _Open:
    def __init__(self, server: asyncio.Server | None = None, flows: UdpFlows | None = None) -> None:
        self.server = server
        self.flows = flows
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.pipes: set[Pipe] = set()


class Listeners:
    def __init__(self, on_tcp: TcpHandler, on_udp: UdpOpener, *, udp_idle: float = 60.0,
                 on_pipe: PipeHandler | None = None, piped: Callable[[ListenKey], bool] = lambda _k: False) -> None:
        self.on_tcp = on_tcp
        self.on_pipe = on_pipe
        self.piped = piped
        self.on_udp = on_udp
        self.udp_idle = udp_idle
        self.open: dict[ListenKey, _Open] = {}

    async def update(self, wanted: set[ListenKey]) -> dict[ListenKey, str]:
        """Listen on exactly `wanted`; returns the keys that could not be bound, with the error."""
        for key in [k for k in self.open if k not in wanted]:
            self._close(key)
        errors: dict[ListenKey, str] = {}
        for key in sorted(wanted - self.open.keys()):
            try:
                await self._start(key)
            except OSError as err:
                errors[key] = err.strerror or str(err)
                log.warning("cannot listen on %s %s:%d: %s", key.protocol, key.ip, key.port, errors[key])
        return errors

    async def _start(self, key: ListenKey) -> None:
        family = socket.AF_INET6 if ":" in key.ip else socket.AF_INET
        loop = asyncio.get_running_loop()
        if key.protocol == "UDP":
            sock = socket.socket(family, socket.SOCK_DGRAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((key.ip, key.port))
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise

            async def opener(peer: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
                return await self.on_udp(key, peer)

            opened: OpenRelay = opener
            _, proto = await loop.create_datagram_endpoint(lambda: UdpFlows(opened, self.udp_idle), sock=sock)
            self.open[key] = _Open(flows=proto)
            return
        entry = _Open()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            entry.writers.add(writer)
            task = asyncio.current_task()
            if task is not None:
                entry.tasks.add(task)
            try:
                await self.on_tcp(key, reader, writer)
            except Exception:
                log.debug("flow on %s failed", key, exc_info=True)
                writer.transport.abort()
            finally:
                entry.writers.discard(writer)
                if task is not None:
                    entry.tasks.discard(task)

        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((key.ip, key.port))
            sock.listen(1024)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        if self.on_pipe is not None and self.piped(key):
            on_pipe = self.on_pipe

            class Accepted(Pipe):
                def connection_made(self, transport: asyncio.BaseTransport) -> None:
                    super().connection_made(transport)
                    entry.pipes.add(self)
                    self.on_close = entry.pipes.discard
                    on_pipe(key, self)

            entry.server = await asyncio.get_running_loop().create_server(Accepted, sock=sock, backlog=1024)
        else:
            entry.server = await asyncio.start_server(handle, sock=sock, limit=READ_SIZE)
        self.open[key] = entry

    def _close(self, key: ListenKey) -> None:
        entry = self.open.pop(key, None)
        if entry is None:
            return
        if entry.server is not None:
            entry.server.close()
        if entry.flows is not None:
            entry.flows.close()
        for w in list(entry.writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        for t in list(entry.tasks):
            t.cancel()  # its relay's far side closes too (relay.pipe's finally)
        for p in list(entry.pipes):
            p.reset()
            if p.peer is not None:
                p.peer.reset()

    def close(self) -> None:
        for key in list(self.open):
            self._close(key)
