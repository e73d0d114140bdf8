"""UDP and TCP listeners in front of a WireCache.

UDP skips asyncio's transports: the loop watches the socket (`add_reader`) and the callback
drains it with plain `recvfrom`/`sendto` until it would block (bounded per wake-up so TCP and
informers still get turns). That saves the transport's per-datagram bookkeeping, measurably
faster than a DatagramProtocol (see bench/dns.py). TCP is an asyncio Protocol that answers every
complete length-prefixed message in a buffer, so pipelined queries get answers in order;
`TcpLimits` bounds how long a connection may take to send a query and how many stay open.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import math
import socket
import struct
import termios
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from time import perf_counter_ns
from typing import cast

from isthmus.dns.mmsg import ADDR, SLOT, MmsgSocket
from isthmus.dns.mmsg import load as load_mmsg
from isthmus.dns.wire import WireCache

__all__ = ["DnsServer", "TcpLimits", "bind_pair", "parse_listen"]

log = logging.getLogger(__name__)

UDP_BATCH = 256
"""Datagrams answered per readiness callback before yielding to the loop."""
UDP_MMSG_BATCH = 64
"""Datagrams per recvmmsg/sendmmsg call (0: recvfrom/sendto). See docs/dns.md for the measurements."""
_MMSG = load_mmsg()
SOCKET_BUFFER = 4 << 20
TCP_LOG_INTERVAL = 60.0
"""At most one log line per this many seconds about connections closed for stalling or to make room."""
_PEEKS = 16
"""Connections checked for an unread query when choosing one to close."""
_RST = struct.pack("ii", 1, 0)
"""SO_LINGER on, zero timeout: close() sends RST and leaves no TIME_WAIT behind."""


@dataclass(frozen=True)
class TcpLimits:
    """How long and how many DNS-over-TCP connections may stay open.

    `query_timeout`: a new connection must deliver a whole length-prefixed query within it, and so
    must an answered one once the first byte of its next query arrives. Trickled bytes never extend
    it, so a slow-loris connection holds a slot for at most this long. 5 s leaves a client on a
    lossy path a few retransmissions (BIND's tcp-initial-timeout may not go below 2.5 s).

    `idle_timeout`: how long an answered connection may wait, silent, for its next query.

    `max_connections`: at this cap a new connection is still accepted, and the oldest idle one
    (answered, nothing received since) is closed; if none is idle, the one that has waited longest
    for its query. BIND (tcp-clients) and NSD (tcp-count) turn the newcomer away instead, which
    during a flood means every real client is turned away while the flood keeps its slots. RFC 7766
    lets a server under attack drop idle connections at once (§6.2.3) and has clients retry a query
    whose connection closed (§6.2.4).

    `max_per_source`: connections one client address may hold. RFC 7766 §6.2.2 asks clients for
    one connection but servers' per-address limits to be "much looser", since an address may be a
    NAT or a forwarder; 64 covers CoreDNS `forward` with `force_tcp` or a node-local cache, which
    open one connection per query in flight for every pod behind them, and keeps one address to
    1/16 of the default table. Over it, that address's own oldest idle (else longest-waiting)
    connection is closed, as at the global cap. Unbound (tcp-connection-limit) and PowerDNS
    (max-tcp-per-client) refuse the newcomer; then a flood sharing an address with real clients (a
    node, a NAT) still denies them, which is what this limit is for.
    """

    query_timeout: float = 5.0
    idle_timeout: float = 10.0
    max_connections: int = 1024
    max_per_source: int = 64

    def __post_init__(self) -> None:
        if not 0 < self.query_timeout < math.inf:
            raise ValueError("--tcp-query-timeout must be a number of seconds above 0")
        if not 0 < self.idle_timeout < math.inf:
            raise ValueError("--tcp-idle-timeout must be a number of seconds above 0")
        if self.max_connections < 1:
            raise ValueError("--tcp-max-connections must be at least 1")
        if self.max_per_source < 1:
            raise ValueError("--tcp-max-per-source must be at least 1")


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
    """One UDP socket served by a reader callback on the loop: batched (recvmmsg/sendmmsg) when
    `mm` is given, else one recvfrom/sendto pair per datagram."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, cache: WireCache, mm: MmsgSocket | None
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.cache = cache
        self.mm = mm
        loop.add_reader(sock.fileno(), self._readable if mm is None else self._readable_batched)

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

    def _readable_batched(self) -> None:
        """Up to `mm.batch` queries in, their answers out in one sendmmsg, repeated while batches
        come back full (bounded by UDP_BATCH). A short batch means the socket is drained: return
        to the loop rather than pay a recvmmsg that finds nothing (epoll wakes us again)."""
        mm = self.mm
        assert mm is not None
        recv = mm.recv
        rbuf = mm.rbuf
        sbuf = mm.sbuf
        addrs = mm.addrs
        lens = mm.lens
        len_index = mm.len_index
        slens = mm.slens
        batch = mm.batch
        answer = self.cache.answer
        stats = self.cache.stats
        done = 0
        while done < UDP_BATCH:
            try:
                n = recv()
            except OSError:  # e.g. a queued ICMP error: nothing to answer, keep draining
                done += 1
                continue
            if not n:
                return
            t0 = perf_counter_ns()
            j = 0
            for i in range(n):
                start = i * SLOT
                resp = answer(rbuf[start : start + lens[len_index[i]]])
                if resp is None:
                    continue
                out = j * SLOT
                sbuf[out : out + len(resp)] = resp
                slens[2 * j + 1] = len(resp)
                if i != j:  # an earlier query got no answer: this peer's address moves to slot j
                    addrs[j * ADDR : j * ADDR + ADDR] = addrs[i * ADDR : i * ADDR + ADDR]
                j += 1
            if j:
                failed = mm.send(j)
                if failed:
                    stats.dropped += failed
                # every answer of the batch waited for the whole batch: that is its latency
                stats.observe_many(perf_counter_ns() - t0, j - failed)
            done += n
            if n < batch:
                return

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        if self.mm is not None:
            self.mm.close()
        self.sock.close()


class _TcpProtocol(asyncio.Protocol):
    """Length-prefixed DNS over TCP: pipelined queries are answered in order.

    A connection is either idle (its queries answered, nothing of the next one received) on the
    idle timeout, or waiting for a whole query on the query deadline. Bytes of an unfinished query
    never restart either clock.
    """

    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.source = ""
        self.idle = False
        self.since = 0.0
        """Loop time it became idle or started waiting: the server closes the oldest first."""
        self.timer: asyncio.TimerHandle | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.source = peer[0] if peer else ""
        self.server._admit(self)

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
        if out:
            assert self.transport is not None
            self.transport.write(b"".join(out))
            if not self.paused:  # paused: pause_writing gave it a deadline to read its answers
                if buf:
                    self.server._wait(self)  # the next query has begun: its own deadline
                else:
                    self.server._rest(self)
        elif self.idle:
            self.server._wait(self)  # the next query has begun: its deadline starts now

    def pause_writing(self) -> None:
        """A client that pipelines but does not read: stop reading its queries, bounding our buffer,
        and give it the query deadline to take its answers."""
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()
        self.server._wait(self)

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None:
            self.transport.resume_reading()
        if self.buf:
            self.server._wait(self)
        else:
            self.server._rest(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._forget(self)

    def has_unread_query(self) -> bool:
        """A whole query already waits in the kernel: the client was prompt, the loop is behind.

        During a connection flood asyncio accepts a batch of connections before it reads any of
        them, so the oldest "waiting" connection may be a real client whose query just arrived.
        """
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None or self.paused:  # paused: its queries wait because it does not read
            return False
        buf = self.buf
        try:
            unread = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
            if len(buf) + unread < 2:
                return False
            head = bytes(buf[:2])
            if len(head) < 2:
                with sock.dup() as peek:  # a transport's socket does not expose recv
                    head += peek.recv(2 - len(head), socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:  # the connection is gone
            return False
        return len(head) == 2 and len(buf) + unread >= 2 + ((head[0] << 8) | head[1])


def _eviction_order(conn: _TcpProtocol) -> tuple[bool, float]:
    return (not conn.idle, conn.since)


def _victim(candidates: Iterable[_TcpProtocol]) -> _TcpProtocol:
    """The first candidate without a whole unread query (checking a few); else the first."""
    first: _TcpProtocol | None = None
    for conn in islice(candidates, _PEEKS):
        if first is None:
            first = conn
        if not conn.has_unread_query():
            return conn
    assert first is not None
    return first


class DnsServer:
    """Serves a WireCache on UDP and TCP at each address (the same port for both).

    Port 0 picks a free port per address (the UDP one, then TCP binds it too); `bound` lists the
    actual (host, port) pairs once started. `tcp` bounds TCP connections (see TcpLimits); it may be
    replaced before `start()`.
    """

    def __init__(
        self,
        cache: WireCache,
        addrs: Sequence[tuple[str, int]],
        *,
        tcp: TcpLimits | None = None,
        udp_batch: int = UDP_MMSG_BATCH,
    ) -> None:
        if udp_batch < 0:
            raise ValueError("--udp-batch must be 0 (recvfrom/sendto) or more")
        self.cache = cache
        self.udp_batch = udp_batch if _MMSG is not None else 0
        self.addrs = list(addrs)
        self.tcp = tcp if tcp is not None else TcpLimits()
        self.bound: list[tuple[str, int]] = []
        self._udp: list[_Udp] = []
        self._tcp: list[asyncio.Server] = []
        # Every open connection is in exactly one of these, in the order it entered that state.
        self._idle: dict[_TcpProtocol, None] = {}
        self._waiting: dict[_TcpProtocol, None] = {}
        self._sources: dict[str, dict[_TcpProtocol, None]] = {}
        self._logged = dict(cache.stats.tcp_closed)
        self._log_at = 0.0
        self._log_later: asyncio.TimerHandle | None = None

    @property
    def udp_io(self) -> str:
        """How UDP is read and written, for logs and benchmark output."""
        return f"recvmmsg/sendmmsg x{self.udp_batch}" if self.udp_batch else "recvfrom/sendto"

    # ---- TCP connection bookkeeping (event loop thread only) ---------------------------------------

    def _admit(self, conn: _TcpProtocol) -> None:
        """Take every new connection; at a limit, close an older one to make room."""
        same = self._sources.get(conn.source)
        if same is not None and len(same) >= self.tcp.max_per_source:
            self._close(_victim(sorted(same, key=_eviction_order)), "source_limit")
        elif len(self._idle) + len(self._waiting) >= self.tcp.max_connections:
            self._close(_victim(chain(self._idle, self._waiting)), "global_limit")
        self._sources.setdefault(conn.source, {})[conn] = None
        self.cache.stats.tcp_connections += 1
        self._wait(conn)

    def _rest(self, conn: _TcpProtocol) -> None:
        self._enter(conn, True, self._idle, self.tcp.idle_timeout)

    def _wait(self, conn: _TcpProtocol) -> None:
        self._enter(conn, False, self._waiting, self.tcp.query_timeout)

    def _enter(self, conn: _TcpProtocol, idle: bool, into: dict[_TcpProtocol, None], timeout: float) -> None:
        if conn.timer is not None:
            conn.timer.cancel()
        self._idle.pop(conn, None)
        self._waiting.pop(conn, None)
        into[conn] = None
        conn.idle = idle
        loop = asyncio.get_running_loop()
        conn.since = loop.time()
        conn.timer = loop.call_at(conn.since + timeout, self._expire, conn)

    def _expire(self, conn: _TcpProtocol) -> None:
        self._close(conn, "idle_timeout" if conn.idle else "query_timeout")

    def _close(self, conn: _TcpProtocol, reason: str) -> None:
        """Idle connections get a FIN; stalled ones, or ones with answers the client is not reading,
        a RST, which frees the socket at once (no TIME_WAIT, nothing left to flush)."""
        graceful = conn.idle
        self._forget(conn)
        stats = self.cache.stats
        stats.tcp_closed[reason] += 1
        t = conn.transport
        if t is not None:
            if graceful and not t.is_closing() and not t.get_write_buffer_size():
                t.close()
            else:
                sock = t.get_extra_info("socket")
                if sock is not None:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
                    except OSError:  # already gone on the kernel side: abort() is enough
                        pass
                t.abort()
        if reason != "idle_timeout":
            self._note()

    def _forget(self, conn: _TcpProtocol) -> None:
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None
        self._idle.pop(conn, None)
        self._waiting.pop(conn, None)
        same = self._sources.get(conn.source)
        if same is not None and conn in same:
            del same[conn]
            if not same:
                del self._sources[conn.source]
            self.cache.stats.tcp_connections -= 1

    def _note(self) -> None:
        """Log now if the last line is TCP_LOG_INTERVAL old, else once that interval is up: a flood
        closes thousands of connections a second and must not write a line for each."""
        if self._log_later is not None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self._log_at:
            self._log_closed()
        else:
            self._log_later = loop.call_at(self._log_at, self._log_closed)

    def _log_closed(self) -> None:
        self._log_later = None
        self._log_at = asyncio.get_running_loop().time() + TCP_LOG_INTERVAL
        closed = self.cache.stats.tcp_closed
        delta = {r: closed[r] - self._logged.get(r, 0) for r in closed if r != "idle_timeout"}
        self._logged = dict(closed)
        if any(delta.values()):
            log.warning(
                "dns tcp connections closed for stalling or to make room",
                extra={**delta, "open": self.cache.stats.tcp_connections},
            )

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def start(self, sockets: Sequence[tuple[socket.socket, socket.socket]] | None = None) -> None:
        """Bind every address, or serve `sockets` ((UDP, listening TCP) per address, bound by a
        parent process: `--workers`); OSError (address in use, not permitted) propagates after
        cleanup."""
        loop = asyncio.get_running_loop()
        try:
            for k, (host, port) in enumerate(self.addrs):
                udp, tcp = sockets[k] if sockets is not None else bind_pair(host, port)
                actual = udp.getsockname()[1]
                mm = MmsgSocket(udp, _MMSG, self.udp_batch) if self.udp_batch and _MMSG is not None else None
                self._udp.append(_Udp(loop, udp, self.cache, mm))
                server = await loop.create_server(lambda: _TcpProtocol(self), sock=tcp)
                self._tcp.append(server)
                self.bound.append((host, actual))
                log.info(
                    "dns listening", extra={"addr": _fmt(host, actual), "proto": "udp+tcp", "udp_io": self.udp_io}
                )
        except BaseException:
            await self.stop()
            raise

    @property
    def serving(self) -> bool:
        """Every listener is open: what the liveness endpoint (on this same event loop) reports, so
        that a process whose loop is hung, or whose listeners are gone, is restarted."""
        return bool(self._tcp) and all(s.is_serving() for s in self._tcp) and all(
            u.sock.fileno() >= 0 for u in self._udp)

    async def stop(self) -> None:
        for u in self._udp:
            u.close()
        self._udp.clear()
        for conn in [*self._idle, *self._waiting]:
            self._forget(conn)
            if conn.transport is not None:
                conn.transport.abort()
        if self._log_later is not None:
            self._log_later.cancel()
            self._log_closed()
        for s in self._tcp:
            s.close()
        for s in self._tcp:
            await s.wait_closed()
        self._tcp.clear()


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_pair(host: str, port: int, *, reuse_port: bool = False) -> tuple[socket.socket, socket.socket]:
    """A bound UDP socket and a listening TCP socket on the same port (port 0: a free one for
    both). `reuse_port`: SO_REUSEPORT on both, so several worker processes share the address and
    the kernel spreads datagrams and connections over them."""
    for attempt in range(20):
        udp = _udp_socket(host, port, reuse_port)
        actual = udp.getsockname()[1]
        try:
            tcp = _tcp_socket(host, actual, reuse_port)
        except OSError as e:
            udp.close()
            if port == 0 and e.errno == errno.EADDRINUSE and attempt < 19:
                continue  # the free UDP port is taken on TCP: try another
            raise
        return udp, tcp
    raise AssertionError("unreachable")  # pragma: no cover


def _udp_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    fam = _family(host)
    sock = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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


def _tcp_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    fam = _family(host)
    sock = socket.socket(fam, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if fam == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
