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
import select
import socket
import struct
from typing import Any, cast

from isthmus.proxy import splice
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
SPLICE_AFTER = 2
"""Client reads relayed by the proxy before a connection is handed to the kernel splice
(splice.py): a connection that carries one request and closes costs less relayed than spliced, one
that carries more is spliced from its second."""
_HALF_CLOSE_WAIT = (0.0005, 0.1)
"""First and longest pause between checks that a spliced direction's bytes all reached the peer."""


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

    __slots__ = (
        "closed", "counted", "eof", "fd", "listener", "moved", "peer", "slack", "spliced", "stats", "transport",
    )

    def __init__(self, listener: TcpListener, stats: ListenerStats) -> None:
        self.listener = listener
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False
        self.closed = False
        self.spliced = False
        """The pair is spliced in the kernel (splice.py): the proxy no longer reads either side."""
        self.fd = -1
        """A spliced side's fd, until its transport is closed (then the number may be another's)."""
        self.moved = 0
        """Bytes from this side counted in the stats."""
        self.counted = False
        """A spliced side's count is final (its EOF was handled)."""
        self.slack = 0
        """A spliced side: what `splice.written` counted beyond the bytes the proxy wrote into it
        when the pair was spliced (a SYN)."""

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
        if peer is not None and peer.transport is not None and not peer.eof and not peer.spliced:
            peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.fd >= 0:  # closed from elsewhere (not _release): the fd is gone, only forget it
            cast(splice.KernelSplice, self.listener.kernel).forget(self.fd, self.kernel_event)
            self.fd = -1
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            peer._release()
            if exc is None:
                peer.transport.close()  # flushes what is queued first
            else:
                reset(peer.transport)

    # -- once spliced: the kernel moves the bytes, the proxy relays EOFs and resets

    def kernel_event(self, events: int) -> None:
        """EOF, hang-up or error on this spliced socket (KernelSplice.watch)."""
        peer = self.peer
        if self.closed or peer is None or peer.transport is None or self.transport is None:
            return
        passed = b""
        if not events & select.EPOLLERR and not self.eof:
            try:
                passed = splice.read_passed(self.fd)
            except OSError:
                events |= select.EPOLLERR
        if events & select.EPOLLERR or peer.closed:
            self._release()
            peer._release()
            reset(peer.transport)
            self.transport.abort()
            return
        if self.eof:
            return
        self.eof = True
        if passed:
            peer.transport.write(passed)
        self.settle()
        self.counted = True
        self._after_drain(self.moved, _HALF_CLOSE_WAIT[0])

    def _after_drain(self, target: int, wait: float) -> None:
        """Half-close the peer once it holds every byte this side received (they pass through the
        peer's kernel queue after this side's EOF is seen), or close both if the peer ended too."""
        peer = cast(_Side, self.peer)
        if peer.closed or peer.transport is None:
            return
        try:
            done = splice.written(peer.fd) - peer.slack >= target
        except OSError:
            done = True  # the peer is gone: nothing left to wait for
        if not done:
            asyncio.get_running_loop().call_later(wait, self._after_drain, target, min(wait * 2, _HALF_CLOSE_WAIT[1]))
            return
        if peer.eof:
            self._release()
            peer._release()
            peer.transport.close()
            if self.transport is not None and not self.closed:
                self.transport.close()
        elif peer.transport.can_write_eof():
            peer.transport.write_eof()

    def settle(self) -> None:
        """Count the bytes the kernel moved from this side."""
        if self.fd >= 0 and not self.counted:
            try:
                n = splice.received(self.fd, self.eof)
            except OSError:
                return
            if n > self.moved:
                self._count(n - self.moved)

    def _release(self) -> None:
        """Before a spliced side's transport closes: count its bytes and stop watching its fd."""
        fd = self.fd
        if fd >= 0:
            self.settle()
            self.fd = -1
            cast(splice.KernelSplice, self.listener.kernel).unwatch(fd)


class _Upstream(_Side):
    """The connection to the backend; made for one `_Downstream`, its peer from the start."""

    __slots__ = ()

    def __init__(self, listener: TcpListener, down: _Downstream) -> None:
        super().__init__(listener, down.stats)
        self.peer = down

    def _count(self, nbytes: int) -> None:
        self.stats.bytes_out += nbytes
        self.moved += nbytes

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

    __slots__ = ("_task", "client_ip", "early", "reads")

    def __init__(self, listener: TcpListener, stats: ListenerStats) -> None:
        super().__init__(listener, stats)
        self._task: asyncio.Task[None] | None = None
        self.client_ip = ""
        self.early: bytearray | None = None
        self.reads = listener.splice_after if listener.kernel is not None else 0
        """Client reads left before the pair is spliced; 0: never."""

    def _count(self, nbytes: int) -> None:
        self.stats.bytes_in += nbytes
        self.moved += nbytes

    def buffer_updated(self, nbytes: int) -> None:
        _Side.buffer_updated(self, nbytes)
        if self.reads:
            self.reads -= 1
            if not self.reads:
                self.listener.splice(self)

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
            if self.spliced:
                cast(splice.KernelSplice, self.listener.kernel).left()
        self.closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        super().connection_lost(exc)

    def abort(self) -> None:
        for side in (self, self.peer):
            if side is not None and side.transport is not None and not side.closed:
                side._release()
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
        self,
        balancer: Balancer,
        stats: ListenerStats,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        kernel: splice.KernelSplice | None = None,
        splice_after: int = SPLICE_AFTER,
    ) -> None:
        self.balancer = balancer
        self.stats = stats
        self.connect_timeout = connect_timeout
        self.kernel = kernel
        """Where connections are spliced once they carry more than `splice_after` client reads;
        None: the proxy relays every byte."""
        self.splice_after = splice_after
        self.connections: set[_Downstream] = set()
        self._server: asyncio.Server | None = None

    async def start(self, sock: socket.socket) -> None:
        """Serve on a bound socket (the proxy binds it, so it controls SO_REUSEPORT and retries)."""
        loop = asyncio.get_running_loop()
        if self.kernel is not None:
            self.kernel.attach(loop)
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

    def splice(self, down: _Downstream) -> None:
        """Hand a relayed pair to the kernel, if both legs are IPv4 and nothing waits in the proxy's
        write buffers (everything read so far went out; what is queued in the sockets goes through
        the program, in order). Otherwise, or if the kernel refuses, the proxy keeps relaying."""
        kernel, up = self.kernel, down.peer
        if kernel is None or up is None or down.eof or up.eof or down.closed or up.closed:
            return
        dt, ut = down.transport, up.transport
        if dt is None or ut is None:
            return
        if dt.get_write_buffer_size() or ut.get_write_buffer_size():
            down.reads = 1  # try again at the next read
            return
        try:
            d_local, d_remote = dt.get_extra_info("sockname"), dt.get_extra_info("peername")
            u_local, u_remote = ut.get_extra_info("sockname"), ut.get_extra_info("peername")
            if ":" in d_local[0] or ":" in u_local[0]:
                return
            d_key = splice.tuple_key(d_local, d_remote)
            u_key = splice.tuple_key(u_local, u_remote)
            dfd, ufd = dt.get_extra_info("socket").fileno(), ut.get_extra_info("socket").fileno()
        except (OSError, TypeError, IndexError, AttributeError):
            return
        dt.pause_reading()
        ut.pause_reading()
        try:
            down.slack = splice.written(dfd) - up.moved
            up.slack = splice.written(ufd) - down.moved
            kernel.join(dfd, d_key, ufd, u_key)
        except OSError as e:
            log.debug("kernel splice refused, relaying", extra={"error": str(e)})
            dt.resume_reading()
            ut.resume_reading()
            return
        down.fd, up.fd = dfd, ufd
        down.spliced = up.spliced = True
        kernel.watch(dfd, down.kernel_event)
        kernel.watch(ufd, up.kernel_event)
        self.stats.spliced += 1

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
