"""UDP and TCP listeners in front of a WireCache.

UDP skips asyncio's transports: the loop watches the socket (`add_reader`) and the callback
drains it with plain `recvfrom`/`sendto` until it would block (bounded per wake-up so TCP and
informers still get turns). That saves the transport's per-datagram bookkeeping, measurably
faster than a DatagramProtocol (see bench/dns.py). TCP is an asyncio Protocol that answers every
complete length-prefixed message in a buffer, so pipelined queries get answers in order.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Sequence
from time import perf_counter_ns
from typing import cast

from isthmus.dns.wire import WireCache

__all__ = ["DnsServer", "parse_listen"]

log = logging.getLogger(__name__)

UDP_BATCH = 256
"""Datagrams answered per readiness callback before yielding to the loop."""
TCP_IDLE_TIMEOUT = 10.0
MAX_TCP_CONNECTIONS = 1024
SOCKET_BUFFER = 4 << 20


def parse_listen(addr: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` (the host is required: a DNS server should not listen everywhere
    by accident). Raises ValueError with a message meant for users."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {addr!r} is not HOST:PORT (e.g. 127.0.0.1:5353 or [::1]:5353)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        raise ValueError(f"--listen {addr!r}: {host!r} is not an IP address") from None
    return host, int(port)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class _Udp:
    """One UDP socket served by a reader callback on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, cache: WireCache) -> None:
        self.loop = loop
        self.sock = sock
        self.cache = cache
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        recv = self.sock.recvfrom
        send = self.sock.sendto
        answer = self.cache.answer
        stats = self.cache.stats
        observe = stats.observe_ns
        for _ in range(UDP_BATCH):
            try:
                data, addr = recv(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. a queued ICMP error: nothing to answer, keep draining
                continue
            t0 = perf_counter_ns()
            resp = answer(data)
            if resp is None:
                continue
            try:
                send(resp, addr)
            except OSError:  # full send buffer or unreachable peer: UDP may drop, the client retries
                stats.dropped += 1
                continue
            observe(perf_counter_ns() - t0)

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


class _TcpProtocol(asyncio.Protocol):
    """Length-prefixed DNS over TCP: pipelined queries are answered in order; idle connections close."""

    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if len(self.server._tcp_conns) >= self.server.max_tcp:
            self.transport.abort()
            return
        self.server._tcp_conns.add(self)
        self._arm()

    def _arm(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        loop = asyncio.get_running_loop()
        self.idle = loop.call_later(self.server.tcp_idle_timeout, self._timeout)

    def _timeout(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        answer = self.server.cache.answer
        stats = self.server.cache.stats
        out: list[bytes] = []
        while len(buf) >= 2:
            size = (buf[0] << 8) | buf[1]
            if len(buf) < 2 + size:
                break
            t0 = perf_counter_ns()
            msg = bytes(buf[2 : 2 + size])
            del buf[: 2 + size]
            resp = answer(msg, True)
            if resp is None:  # not even a header: the stream is garbage, stop reading it
                assert self.transport is not None
                self.transport.write(b"".join(out))
                self.transport.close()
                return
            out.append(len(resp).to_bytes(2, "big") + resp)
            stats.observe_ns(perf_counter_ns() - t0)
        if out and self.transport is not None:
            self.transport.write(b"".join(out))
        self._arm()

    def pause_writing(self) -> None:
        """A client that pipelines but does not read: stop reading its queries, bounding our buffer."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.server._tcp_conns.discard(self)


class DnsServer:
    """Serves a WireCache on UDP and TCP at each address (the same port for both).

    Port 0 picks a free port per address (the UDP one, then TCP binds it too); `bound` lists the
    actual (host, port) pairs once started.
    """

    def __init__(
        self,
        cache: WireCache,
        addrs: Sequence[tuple[str, int]],
        *,
        tcp_idle_timeout: float = TCP_IDLE_TIMEOUT,
        max_tcp: int = MAX_TCP_CONNECTIONS,
    ) -> None:
        self.cache = cache
        self.addrs = list(addrs)
        self.tcp_idle_timeout = tcp_idle_timeout
        self.max_tcp = max_tcp
        self.bound: list[tuple[str, int]] = []
        self._udp: list[_Udp] = []
        self._tcp: list[asyncio.Server] = []
        self._tcp_conns: set[_TcpProtocol] = set()

    async def start(self) -> None:
        """Bind every address; OSError (address in use, not permitted) propagates after cleanup."""
        loop = asyncio.get_running_loop()
        try:
            for host, port in self.addrs:
                for attempt in range(20):
                    udp = _udp_socket(host, port)
                    actual = udp.getsockname()[1]
                    try:
                        tcp = _tcp_socket(host, actual)
                    except OSError as e:
                        udp.close()
                        if port == 0 and e.errno == errno.EADDRINUSE and attempt < 19:
                            continue  # the free UDP port is taken on TCP: try another
                        raise
                    break
                self._udp.append(_Udp(loop, udp, self.cache))
                server = await loop.create_server(lambda: _TcpProtocol(self), sock=tcp)
                self._tcp.append(server)
                self.bound.append((host, actual))
                log.info("dns listening", extra={"addr": _fmt(host, actual), "proto": "udp+tcp"})
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for u in self._udp:
            u.close()
        self._udp.clear()
        for conn in list(self._tcp_conns):
            if conn.transport is not None:
                conn.transport.abort()
        for s in self._tcp:
            s.close()
        for s in self._tcp:
            await s.wait_closed()
        self._tcp.clear()


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _udp_socket(host: str, port: int) -> socket.socket:
    fam = _family(host)
    sock = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        if fam == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            except OSError:  # pragma: no cover - the kernel clamps; failing is harmless
                pass
        sock.setblocking(False)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _tcp_socket(host: str, port: int) -> socket.socket:
    fam = _family(host)
    sock = socket.socket(fam, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
