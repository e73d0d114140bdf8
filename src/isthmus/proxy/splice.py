"""Kernel splice of a relayed TCP connection: a sockmap program moves the bytes, not the proxy.

Once both legs of a relayed connection are open, the proxy files each socket in a BPF `SOCKHASH`
under the address tuple of the *other* leg. An `sk_skb` verdict program attached to that map runs
for every segment either leg receives: it builds the key from the receiving socket's own tuple and
redirects the bytes to the egress of the socket filed under it — its peer (`bpf_sk_redirect_hash`,
the sockmap redirect Cilium uses). The proxy process is neither woken nor asked to copy anything;
it only watches each leg for EOF and errors (EPOLLRDHUP, which redirected data does not raise) to
relay half-closes and resets. A socket leaves the map by itself when it is closed.

Three details keep the byte stream exact:

- **Bytes already queued when a leg is filed** are not lost: both legs get a high SO_RCVLOWAT
  first, so the kernel does not hand queued data to the program while only one leg is filed, and
  setting it back to 1 afterwards makes the kernel run the program over everything queued
  (`tcp_set_rcvlowat` calls `tcp_data_ready`).
- **The program passes a segment on to its own socket** when the peer is not filed (yet: a FIN can
  still wake the program in that instant) and when it carries no bytes (the FIN itself, so the proxy
  sees EOF; redirecting an empty segment breaks the peer's send side). The proxy reads what was
  passed when it handles the EOF, and relays it before the half-close.
- **A half-close waits for the redirected bytes**: they travel through the peer's queue in the
  kernel, so the proxy shuts the peer's sending side only once the peer has taken every byte the
  other leg received (TCP_INFO's bytes received against the peer's bytes acked plus its send queue).

Needs Linux with BPF sockmap (5.x+, tested on 6.x) and CAP_BPF with CAP_NET_ADMIN (root). Where
loading fails — no privilege, an older kernel, seccomp — `KernelSplice()` raises and the proxy
relays in userspace as before. The program is 31 instructions, assembled with `bpf.py`.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import select
import socket
import struct
from collections.abc import Callable

from isthmus.proxy import bpf

__all__ = ["KernelSplice", "SpliceUnavailable", "shared"]

log = logging.getLogger(__name__)

_SOCKHASH = 18
_PROG_SK_SKB = 14
_SK_SKB_VERDICT = 38
# struct __sk_buff offsets (uapi/linux/bpf.h)
_SKB_LEN, _SKB_REMOTE_IP4, _SKB_LOCAL_IP4, _SKB_REMOTE_PORT, _SKB_LOCAL_PORT = 0, 92, 96, 132, 136
_TCP_INFO_BYTES_ACKED = 120
_TCP_INFO_LEN = 136
_SIOCOUTQ = 0x5411
_FIN_RECEIVED = frozenset({8, 9, 11, 6})
"""TCP states after the peer's FIN: CLOSE_WAIT, LAST_ACK, CLOSING, TIME_WAIT (include/net/tcp_states.h)."""
_LOWAT_HOLD = 1 << 20
"""SO_RCVLOWAT while a pair is being filed: above anything a peer sends in that instant (the kernel
caps it at half the receive buffer's maximum, still far above)."""
MAX_PAIRS = 32768
"""Connections spliced at once; beyond this new ones are relayed in userspace."""

class SpliceUnavailable(OSError):
    """The kernel refused the map or the program (privilege, kernel version, seccomp)."""


def verdict_program(map_fd: int) -> bytes:
    """The sk_skb verdict: redirect to the socket filed under the receiving socket's own tuple.

        if (skb->len == 0) return SK_PASS;                      // the FIN: the proxy relays EOF
        key = {remote_ip4, local_ip4, remote_port, local_port};  // as the kernel gives them
        sk = bpf_map_lookup_elem(&pairs, &key);
        if (!sk) return SK_PASS;                                // peer not filed (yet)
        bpf_sk_release(sk);
        return bpf_sk_redirect_hash(skb, &pairs, &key, 0);      // to the peer's egress
    """
    skb = bpf.R6
    body = [
        bpf.insn(bpf.MOV64_REG, skb, bpf.R1),
        bpf.insn(bpf.LDX_W, bpf.R2, skb, _SKB_LEN),
        bpf.insn(bpf.JEQ_IMM, bpf.R2, off=bpf.END, imm=0),
    ]
    for i, field in enumerate((_SKB_REMOTE_IP4, _SKB_LOCAL_IP4, _SKB_REMOTE_PORT, _SKB_LOCAL_PORT)):
        body += [bpf.insn(bpf.LDX_W, bpf.R2, skb, field), bpf.insn(bpf.STX_W, bpf.R10, bpf.R2, -16 + 4 * i)]
    body += [
        *bpf.ld_map(bpf.R1, map_fd),
        bpf.insn(bpf.MOV64_REG, bpf.R2, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R2, imm=-16),
        bpf.insn(bpf.CALL, imm=bpf.LOOKUP),
        bpf.insn(bpf.JEQ_IMM, bpf.R0, off=bpf.END, imm=0),
        bpf.insn(bpf.MOV64_REG, bpf.R1, bpf.R0), bpf.insn(bpf.CALL, imm=bpf.SK_RELEASE),
        bpf.insn(bpf.MOV64_REG, bpf.R1, skb),
        *bpf.ld_map(bpf.R2, map_fd),
        bpf.insn(bpf.MOV64_REG, bpf.R3, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R3, imm=-16),
        bpf.insn(bpf.MOV64_IMM, bpf.R4, imm=0),
        bpf.insn(bpf.CALL, imm=bpf.SK_REDIRECT_HASH),
        bpf.insn(bpf.EXIT),
    ]
    return bpf.assemble(body)  # END: return SK_PASS (1)


def tuple_key(local: tuple[str, int], remote: tuple[str, int]) -> bytes:
    """A socket's tuple as the program reads it from `__sk_buff`: addresses in network order, the
    remote port in network order in the upper half of its word, the local port in host order."""
    return (
        socket.inet_aton(remote[0]) + socket.inet_aton(local[0])
        + struct.pack("<II", socket.htons(remote[1]) << 16, local[1])
    )


class KernelSplice:
    """One process's sockmap and verdict program, and the watch on spliced sockets' EOFs."""

    def __init__(self) -> None:
        self.pairs = 0
        self._map = -1
        self._prog = -1
        self._epoll: select.epoll | None = None
        self._watched: dict[int, Callable[[int], None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            self._map = bpf.map_create(_SOCKHASH, 16, 8, 2 * MAX_PAIRS)
            self._prog = bpf.load(_PROG_SK_SKB, verdict_program(self._map), _SK_SKB_VERDICT, b"isthmus_splice")
            bpf.syscall(bpf.PROG_ATTACH, struct.pack("<IIII", self._map, self._prog, _SK_SKB_VERDICT, 0))
        except OSError as e:
            self.close()
            raise SpliceUnavailable(e.errno, f"kernel splice unavailable: {e.strerror}") from None
        self._epoll = select.epoll()

    @property
    def epoll_fd(self) -> int:
        assert self._epoll is not None
        return self._epoll.fileno()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the spliced sockets' events from `loop` (once per loop)."""
        if self._loop is not loop and self._epoll is not None:
            loop.add_reader(self._epoll.fileno(), self.ready)
            self._loop = loop

    def close(self) -> None:
        if self._loop is not None and self._epoll is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._epoll.fileno())
        self._loop = None
        for fd in (self._prog, self._map):
            if fd >= 0:
                os.close(fd)
        self._prog = self._map = -1
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None

    def join(self, a: int, a_key: bytes, b: int, b_key: bytes) -> None:
        """File sockets `a` and `b` (fds) as each other's peer. Raises OSError if the kernel refuses;
        both are then left as they were, still read by the proxy."""
        if self.pairs >= MAX_PAIRS:
            raise OSError(28, "kernel splice map full")
        sa, sb = _wrap(a), _wrap(b)
        try:
            clamps = (sa.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP),
                      sb.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP))
            sa.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, _LOWAT_HOLD)
            sb.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, _LOWAT_HOLD)
            try:
                self._file(a_key, b)
                self._file(b_key, a)
            finally:
                # Runs the program (or, had filing failed, wakes the proxy's reads) over what queued.
                sa.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
                sb.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
                # A high SO_RCVLOWAT clamped the window to it; give autotuning its room back.
                sa.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamps[0])
                sb.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamps[1])
        finally:
            sa.detach()
            sb.detach()
        self.pairs += 1

    def _file(self, key: bytes, fd: int) -> None:
        bpf.map_update(self._map, key, struct.pack("<Q", fd), bpf.NOEXIST)

    def left(self) -> None:
        """A spliced pair closed (its sockets left the map with it)."""
        self.pairs -= 1

    def watch(self, fd: int, callback: Callable[[int], None]) -> None:
        """Call `callback(events)` on EOF (EPOLLRDHUP), hang-up or error of `fd`, edge-triggered."""
        assert self._epoll is not None
        self._watched[fd] = callback
        self._epoll.register(fd, select.EPOLLRDHUP | select.EPOLLET)

    def unwatch(self, fd: int) -> None:
        if self._watched.pop(fd, None) is not None and self._epoll is not None:
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass  # closed already: the kernel dropped it

    def forget(self, fd: int, callback: Callable[[int], None]) -> None:
        """`fd` was closed (the kernel dropped its watch): drop `callback`, unless the number is
        already watched for another socket."""
        if self._watched.get(fd) == callback:
            del self._watched[fd]

    def ready(self) -> None:
        """The epoll fd is readable: dispatch its events."""
        if self._epoll is None:
            return
        for fd, events in self._epoll.poll(0):
            cb = self._watched.get(fd)
            if cb is not None:
                cb(events)


_shared: KernelSplice | None = None
_refused: str | None = None


def shared() -> KernelSplice | None:
    """The process's splice, loaded on first use and kept; None where the kernel refuses it (said
    once in the log: the proxy then relays every byte itself)."""
    global _shared, _refused
    if _shared is None and _refused is None:
        try:
            _shared = KernelSplice()
        except SpliceUnavailable as e:
            _refused = str(e.strerror)
            log.info("relaying every byte in the proxy", extra={"reason": _refused})
    return _shared


def _wrap(fd: int) -> socket.socket:
    """A socket object over an fd the event loop owns (detach it after use); family and type given,
    so Python does not ask the kernel."""
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, fileno=fd)


def received(fd: int, eof: bool) -> int:
    """Bytes this TCP socket has received: TCP_INFO's tcpi_bytes_received, less the sequence number
    a received FIN takes (`eof`: the caller saw it; the state tells it too, except once the socket
    is past TIME_WAIT)."""
    s = _wrap(fd)
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    finally:
        s.detach()
    n = int(struct.unpack_from("<Q", info, _TCP_INFO_BYTES_ACKED + 8)[0])
    return n - 1 if eof or info[0] in _FIN_RECEIVED else n


def written(fd: int) -> int:
    """Bytes written into this TCP socket: acknowledged by the peer plus still in its send queue.
    Acked is read first, so an ACK in between can only make the sum smaller, never early. An actively
    opened socket counts its SYN in tcpi_bytes_acked on some kernels: callers compare differences."""
    s = _wrap(fd)
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    finally:
        s.detach()
    acked = int(struct.unpack_from("<Q", info, _TCP_INFO_BYTES_ACKED)[0])
    queued = struct.unpack("i", fcntl.ioctl(fd, _SIOCOUTQ, b"\0\0\0\0"))[0]
    return acked + int(queued)


def read_passed(fd: int) -> bytes:
    """What the program passed to the socket itself (see the module doc), up to its EOF."""
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break  # OSError (a reset) goes to the caller
        if not chunk:
            break
        out += chunk
    return bytes(out)
