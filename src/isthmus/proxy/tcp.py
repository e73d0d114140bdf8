"""TCP listener: accept on the virtual address, connect to a backend, relay both ways.

The relay is two `BufferedProtocol`s wired to each other's transports rather than asyncio streams:
no task or `await` per chunk, and reads land in one buffer shared by every connection (see _ReadBuffer)
(`recv_into`), so relaying a chunk costs one `recv_into` and one `send` when the far side keeps up.
When a transport cannot send at once it keeps (3.12+) or copies (3.11) what was left, so the
shared buffer is replaced whenever a write leaves bytes queued. Backpressure is the transports' own
flow control: a side whose write buffer fills pauses reading on the other side.

Half-close is relayed (EOF one way becomes `shutdown(SHUT_WR)` the other way); the pair closes when
both directions have ended, and a reset on one side aborts the other. With no backend the client
is accepted and reset at once (SO_LINGER 0), as kube-proxy rejects; a backend that refuses or
does not answer within the connect timeout is skipped for the next one.

A new connection costs one task (the backend connect): the client is read meanwhile and what it
sends, EOF included, is handed to the backend connection in its `connection_made`. Both loops
work (uvloop is the default, see isthmus.runtime.loop): uvloop's transports are not
`asyncio.Transport` subclasses, it starts reading only after `connection_made` (so pausing there
holds nothing back), and its `sock_connect` resolves even a literal IP on a thread pool — hence
`runtime.sockets.connect()`. Figures: bench/proxy.py and docs/proxy.md.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Any, cast

from isthmus.proxy.balancer import Balancer
from isthmus.proxy.metrics import ListenerStats
from isthmus.proxy.table import Backend
from isthmus.runtime.sockets import connect

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "TcpListener"]

log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT = 2.0
BUFFER_SIZE = 256 * 1024
"""One read's worth; as large as asyncio's own read size, so bulk transfers take few syscalls."""
BACKLOG = 1024
EARLY_LIMIT = 64 * 1024
"""Client bytes kept while the backend connects (any request head fits); beyond this the client's
reads pause and the kernel holds the rest, so a crowd of clients waiting on a slow backend costs
at most this much each."""
_LINGER_RESET = struct.pack("ii", 1, 0)
_NONBLOCK: int = getattr(socket, "SOCK_NONBLOCK", 0)
_STREAM_NONBLOCK = socket.SOCK_STREAM | _NONBLOCK
"""Non-blocking from socket() on Linux: one syscall fewer per backend connection than setblocking."""
IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h: the port is picked at connect, so one address serves every peer


class _ReadBuffer:
    """The one read buffer of every relayed connection in the process.

    asyncio reads into it and calls `buffer_updated` in the same callback, which writes the bytes
    on before any other read can happen (the loop is single-threaded), so one buffer serves all
    listeners: a buffer per listener cost 256 KB each, 256 MB for a thousand Services. It is
    replaced whenever a write leaves bytes queued (the transport may still reference them).
    """

    def __init__(self) -> None:
        self.view = memoryview(bytearray(BUFFER_SIZE))

    def fresh(self) -> None:
        self.view = memoryview(bytearray(BUFFER_SIZE))


_READ = _ReadBuffer()


def reset(transport: asyncio.BaseTransport) -> None:
    """Close with an RST rather than a FIN, so the client sees "connection refused"-like failure."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        except OSError:
            pass
    cast(asyncio.Transport, transport).abort()


class _Side(asyncio.BufferedProtocol):
    """One end of a relayed connection; `peer` is the other end."""

    __slots__ = ("closed", "eof", "listener", "peer", "stats", "transport")

    def __init__(self, listener: TcpListener, stats: ListenerStats) -> None:
        self.listener = listener
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ.view

    def buffer_updated(self, nbytes: int) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self._early(nbytes)
            return
        self._count(nbytes)
        out = peer.transport
        out.write(_READ.view[:nbytes])
        if out.get_write_buffer_size():
            _READ.fresh()  # the transport kept (or copied) part of this one

    def _count(self, nbytes: int) -> None:
        raise NotImplementedError

    def _early(self, nbytes: int) -> None:
        """Bytes read before the other side exists (the client's, while the backend connects)."""

    def _early_eof(self) -> bool:
        return False

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is None:
            return self._early_eof()
        if peer.transport is None or peer.closed:
            return False
        if peer.eof:
            peer.transport.close()
            return False  # both directions ended
        if peer.transport.can_write_eof():
            peer.transport.write_eof()
        return True  # keep our write side open for the peer's remaining data

    def pause_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.eof:
            peer.transport.pause_reading()

    def resume_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.eof:
            peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            if exc is None:
                peer.transport.close()  # flushes what is queued first
            else:
                reset(peer.transport)


class _Upstream(_Side):
    """The connection to the backend; made for one `_Downstream`, its peer from the start."""

    __slots__ = ()

    def __init__(self, listener: TcpListener, down: _Downstream) -> None:
        super().__init__(listener, down.stats)
        self.peer = down

    def _count(self, nbytes: int) -> None:
        self.stats.bytes_out += nbytes

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = t = cast(asyncio.Transport, transport)
        down = cast(_Downstream, self.peer)
        if down.closed:
            t.close()  # the client gave up while this connected
        else:
            down.attach(self)  # now, not a loop turn later when create_connection returns


class _Downstream(_Side):
    """The accepted client connection; picks and connects the backend.

    It reads while the backend connects, keeping what the client sends (up to EARLY_LIMIT, then
    it pauses) and its EOF for the backend: the client's first request is not held up by an extra
    pause/resume, and uvloop starts reading after `connection_made`, so pausing there would not
    hold the bytes back anyway.
    """

    __slots__ = ("_task", "client_ip", "early")

    def __init__(self, listener: TcpListener, stats: ListenerStats) -> None:
        super().__init__(listener, stats)
        self._task: asyncio.Task[None] | None = None
        self.client_ip = ""
        self.early: bytearray | None = None

    def _count(self, nbytes: int) -> None:
        self.stats.bytes_in += nbytes

    def _early(self, nbytes: int) -> None:
        if self.closed or self.transport is None:
            return
        if self.early is None:
            self.early = bytearray(_READ.view[:nbytes])
        else:
            self.early += _READ.view[:nbytes]
        if len(self.early) >= EARLY_LIMIT:
            self.transport.pause_reading()  # resumed once the backend takes it

    def _early_eof(self) -> bool:
        return not self.closed  # half-closed before the backend answered: relayed once it does

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        stats = self.stats
        stats.connections += 1
        peer = transport.get_extra_info("peername")
        self.client_ip = peer[0] if peer else ""
        backend = self.listener.balancer.pick(self.client_ip)
        if backend is None:
            stats.no_endpoints += 1
            self.closed = True
            reset(transport)
            return
        stats.active += 1
        self.listener.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._connect(backend))

    async def _connect(self, backend: Backend) -> None:
        listener = self.listener
        stats = self.stats
        tried: list[Backend] = []
        current: Backend | None = backend
        while current is not None:
            try:
                up = await listener.open_upstream(current, self)
            except TimeoutError:
                stats.connect_timeout += 1
            except OSError as e:
                stats.connect_failed += 1
                log.debug(
                    "backend connect failed",
                    extra={"backend": f"{current.host}:{current.port}", "error": str(e)},
                )
            else:
                if self.closed and up.transport is not None:
                    up.transport.close()
                return  # attached in up.connection_made
            listener.balancer.forget(self.client_ip, current)
            tried.append(current)
            current = listener.balancer.pick(self.client_ip, exclude=tried)
        if not self.closed and self.transport is not None:
            reset(self.transport)

    def attach(self, up: _Upstream) -> None:
        """The backend answered: hand it what the client sent meanwhile, then relay directly."""
        self.peer = up
        out = up.transport
        assert out is not None and self.transport is not None
        early, self.early = self.early, None
        if early:
            self._count(len(early))
            out.write(early)
        if self.eof:
            if out.can_write_eof():
                out.write_eof()
        elif early is not None and len(early) >= EARLY_LIMIT:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.listener.connections:
            self.listener.connections.discard(self)
            self.stats.active -= 1
        self.closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        super().connection_lost(exc)

    def abort(self) -> None:
        for side in (self, self.peer):
            if side is not None and side.transport is not None and not side.closed:
                side.transport.abort()


def keep_client_address(sock: socket.socket, client_ip: str, backend_host: str, *, stream: bool) -> None:
    """Connect from the client's own address, as kube-proxy's DNAT leaves it: the backend sees which
    pod called (egress forwarders admit clients by pod address). Possible on loopback only, where
    every 127.x address is local; elsewhere, and if the bind fails, the kernel picks as before."""
    if not (client_ip.startswith("127.") and backend_host.startswith("127.")):
        return
    try:
        if stream:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((client_ip, 0))
    except OSError:
        pass




class TcpListener:
    """Serves one listening socket; the balancer and stats are swapped by the proxy on updates."""

    def __init__(
        self, balancer: Balancer, stats: ListenerStats, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    ) -> None:
        self.balancer = balancer
        self.stats = stats
        self.connect_timeout = connect_timeout
        self.connections: set[_Downstream] = set()
        self._server: asyncio.Server | None = None

    async def start(self, sock: socket.socket) -> None:
        """Serve on a bound socket (the proxy binds it, so it controls SO_REUSEPORT and retries)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Downstream(self, self.stats), sock=sock, backlog=BACKLOG
        )

    async def open_upstream(self, backend: Backend, down: _Downstream) -> _Upstream:
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in backend.host else socket.AF_INET
        # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say so (uvloop
        # on every TCP socket); without it Nagle holds a relayed request's second segment.
        sock = socket.socket(family, _STREAM_NONBLOCK, socket.IPPROTO_TCP)
        try:
            if not _NONBLOCK:
                sock.setblocking(False)
            keep_client_address(sock, down.client_ip, backend.host, stream=True)
            await connect(loop, sock, backend, self.connect_timeout)
            up = _Upstream(self, down)
            await loop.create_connection(lambda: up, sock=sock)
        except BaseException:
            sock.close()
            raise
        return up

    def close(self) -> None:
        """Stop accepting; connections already relayed keep their backend until they end."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def abort_all(self) -> None:
        for c in list(self.connections):
            c.abort()

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(self._server.sockets) if self._server is not None else ()
