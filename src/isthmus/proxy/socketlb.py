"""Connect-time balancing: a cgroup BPF program points a client's connect() at a backend.

Cilium's socket LB, for the userspace mode's TCP ClusterIPs and VIPs. A `connect4` program
attached to the machine's cgroup v2 root runs in every `connect()` of this network namespace: when
the destination is a service address this proxy serves, it replaces it with one of the service's
ready endpoints (picked at random, as kube-proxy's nftables mode does), so the connection goes
straight to the backend: no relay, no NAT, nothing per packet. A `getpeername4` program answers a
balanced socket's `getpeername()` with the service address, as DNAT shows it. The proxy's
listeners stay bound underneath and serve everything the program leaves alone: UDP, NodePorts,
ClientIP affinity, IPv6, services without endpoints (the listener resets, as kube-proxy rejects),
clients in other network namespaces, and every connection while the proxy is down or starting.

Maps (one set per proxy): `services` {netns cookie, address, port} → {endpoint count, first slot};
`slots`, an array of endpoint {address, port}, each service owning a run of 2^k slots; `counts`
{service key} → connections balanced (an atomic add; read when metrics are scraped); `peers`, an
LRU of socket cookie → the service address, for getpeername. Updates never show a half-written
service: a run grows into fresh slots before the service entry points at it, shrinks by lowering
the count first, and a run given up is reused only after a quarantine.

The programs are attached through BPF links, so they leave with the process however it ends.
Needs Linux 5.7+ (netns cookies in these programs, BPF links; tested on 6.18), cgroup v2 and
root. Where loading fails, `SocketLB()` raises `SocketLBUnavailable` and the listeners relay as
before.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import struct
import time

from isthmus.proxy.splice import _bpf, _insn

__all__ = ["SocketLB", "SocketLBUnavailable", "open_socket_lb"]

log = logging.getLogger(__name__)

_BPF_MAP_CREATE, _BPF_MAP_LOOKUP, _BPF_MAP_UPDATE, _BPF_MAP_DELETE = 0, 1, 2, 3
_BPF_PROG_LOAD, _BPF_LINK_CREATE = 5, 28
_HASH, _ARRAY, _LRU_HASH = 1, 2, 9
_PROG_CGROUP_SOCK_ADDR = 18
_INET4_CONNECT, _INET4_GETPEERNAME = 10, 29
_BPF_NOEXIST = 1
_SO_NETNS_COOKIE = 71
# helpers
_LOOKUP, _UPDATE, _PRANDOM, _SOCKET_COOKIE, _NETNS_COOKIE = 1, 2, 7, 46, 122
# struct bpf_sock_addr offsets (uapi/linux/bpf.h)
_USER_IP4, _USER_PORT, _PROTOCOL = 4, 24, 36
# opcodes
_MOV64_REG, _MOV64_IMM, _ADD64_IMM = 0xBF, 0xB7, 0x07
_LDX_W, _STX_W, _STX_DW, _LD_IMM64 = 0x61, 0x63, 0x7B, 0x18
_MOD32_REG, _ADD32_REG = 0x9C, 0x0C
_ATOMIC_ADD_DW = 0xDB
_JEQ_IMM, _JNE_IMM, _CALL, _EXIT = 0x15, 0x55, 0x85, 0x95
_R0, _R1, _R2, _R3, _R4, _R6, _R7, _R8, _R10 = 0, 1, 2, 3, 4, 6, 7, 8, 10
_TO_END = -32768
"""Placeholder jump offset: to the program's final `return 1` (allow the call as it is)."""

MAX_SERVICES = 16384
MAX_SLOTS = 65536
MAX_PEERS = 65536
QUARANTINE = 2.0
"""Seconds a given-up run of slots waits before reuse (a connect() may still be reading it)."""


class SocketLBUnavailable(OSError):
    """The kernel refused a map, a program or the cgroup attachment."""


def _ld_map(reg: int, fd: int) -> list[bytes]:
    return [_insn(_LD_IMM64, reg, 1, imm=fd), _insn(0)]


def _resolve(body: list[bytes]) -> bytes:
    """Append `return 1` and point every `_TO_END` jump at it."""
    end = len(body)
    body = [*body, _insn(_MOV64_IMM, _R0, imm=1), _insn(_EXIT)]
    for i, insn in enumerate(body):
        code, regs, off, imm = struct.unpack("<BBhi", insn)
        if off == _TO_END:
            body[i] = struct.pack("<BBhi", code, regs, end - i - 1, imm)
    return b"".join(body)


def connect_program(services: int, slots: int, counts: int, peers: int) -> bytes:
    """    if (ctx->protocol != IPPROTO_TCP) return 1;
        key = {bpf_get_netns_cookie(ctx), ctx->user_ip4, ctx->user_port};
        svc = lookup(&services, &key);  if (!svc || !svc->count) return 1;
        slot = svc->first + bpf_get_prandom_u32() % svc->count;
        ep = lookup(&slots, &slot);  if (!ep) return 1;
        ctx->user_ip4 = ep->ip4;  ctx->user_port = ep->port;
        n = lookup(&counts, &key);  if (n) __sync_fetch_and_add(n, 1);
        cookie = bpf_get_socket_cookie(ctx);
        update(&peers, &cookie, &key.ip4_and_port, BPF_ANY);
        return 1;
    Stack: key at fp-16 (cookie 8, ip4 4, port 4), slot at fp-20, socket cookie at fp-32."""
    return _resolve([
        _insn(_MOV64_REG, _R6, _R1),
        _insn(_LDX_W, _R2, _R6, _PROTOCOL), _insn(_JNE_IMM, _R2, off=_TO_END, imm=socket.IPPROTO_TCP),
        _insn(_MOV64_REG, _R1, _R6), _insn(_CALL, imm=_NETNS_COOKIE), _insn(_STX_DW, _R10, _R0, -16),
        _insn(_LDX_W, _R2, _R6, _USER_IP4), _insn(_STX_W, _R10, _R2, -8),
        _insn(_LDX_W, _R2, _R6, _USER_PORT), _insn(_STX_W, _R10, _R2, -4),
        *_ld_map(_R1, services), _insn(_MOV64_REG, _R2, _R10), _insn(_ADD64_IMM, _R2, imm=-16),
        _insn(_CALL, imm=_LOOKUP), _insn(_JEQ_IMM, _R0, off=_TO_END, imm=0),
        _insn(_LDX_W, _R7, _R0, 0), _insn(_LDX_W, _R8, _R0, 4),
        _insn(_JEQ_IMM, _R7, off=_TO_END, imm=0),
        _insn(_CALL, imm=_PRANDOM), _insn(_MOD32_REG, _R0, _R7), _insn(_ADD32_REG, _R0, _R8),
        _insn(_STX_W, _R10, _R0, -20),
        *_ld_map(_R1, slots), _insn(_MOV64_REG, _R2, _R10), _insn(_ADD64_IMM, _R2, imm=-20),
        _insn(_CALL, imm=_LOOKUP), _insn(_JEQ_IMM, _R0, off=_TO_END, imm=0),
        _insn(_LDX_W, _R2, _R0, 0), _insn(_STX_W, _R6, _R2, _USER_IP4),
        _insn(_LDX_W, _R2, _R0, 4), _insn(_STX_W, _R6, _R2, _USER_PORT),
        *_ld_map(_R1, counts), _insn(_MOV64_REG, _R2, _R10), _insn(_ADD64_IMM, _R2, imm=-16),
        _insn(_CALL, imm=_LOOKUP), _insn(_JEQ_IMM, _R0, off=2, imm=0),
        _insn(_MOV64_IMM, _R1, imm=1), _insn(_ATOMIC_ADD_DW, _R0, _R1, 0),
        _insn(_MOV64_REG, _R1, _R6), _insn(_CALL, imm=_SOCKET_COOKIE), _insn(_STX_DW, _R10, _R0, -32),
        *_ld_map(_R1, peers), _insn(_MOV64_REG, _R2, _R10), _insn(_ADD64_IMM, _R2, imm=-32),
        _insn(_MOV64_REG, _R3, _R10), _insn(_ADD64_IMM, _R3, imm=-8), _insn(_MOV64_IMM, _R4, imm=0),
        _insn(_CALL, imm=_UPDATE),
    ])


def getpeername_program(peers: int) -> bytes:
    """    svc = lookup(&peers, bpf_get_socket_cookie(ctx));
        if (svc) { ctx->user_ip4 = svc->ip4; ctx->user_port = svc->port; }
        return 1;"""
    return _resolve([
        _insn(_MOV64_REG, _R6, _R1),
        _insn(_MOV64_REG, _R1, _R6), _insn(_CALL, imm=_SOCKET_COOKIE), _insn(_STX_DW, _R10, _R0, -8),
        *_ld_map(_R1, peers), _insn(_MOV64_REG, _R2, _R10), _insn(_ADD64_IMM, _R2, imm=-8),
        _insn(_CALL, imm=_LOOKUP), _insn(_JEQ_IMM, _R0, off=_TO_END, imm=0),
        _insn(_LDX_W, _R2, _R0, 0), _insn(_STX_W, _R6, _R2, _USER_IP4),
        _insn(_LDX_W, _R2, _R0, 4), _insn(_STX_W, _R6, _R2, _USER_PORT),
    ])


def _cgroup2_root() -> str:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return left.split()[4]
    raise OSError(2, "no cgroup v2 mount")


def _addr(ip: str, port: int) -> bytes:
    return socket.inet_aton(ip) + struct.pack("<I", socket.htons(port))


class SocketLB:
    """One proxy's maps and attached programs."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        try:
            self._services = self._map(_HASH, 16, 8, MAX_SERVICES)
            self._slots = self._map(_ARRAY, 4, 8, MAX_SLOTS)
            self._counts = self._map(_HASH, 16, 8, MAX_SERVICES)
            self._peers = self._map(_LRU_HASH, 8, 8, MAX_PEERS)
            connect = self._load(connect_program(self._services, self._slots, self._counts, self._peers),
                                 _INET4_CONNECT)
            peername = self._load(getpeername_program(self._peers), _INET4_GETPEERNAME)
            cgroup = os.open(_cgroup2_root(), os.O_RDONLY | os.O_DIRECTORY)
            self._fds.append(cgroup)
            for prog, kind in ((connect, _INET4_CONNECT), (peername, _INET4_GETPEERNAME)):
                self._fds.append(_bpf(_BPF_LINK_CREATE, struct.pack("<IIII", prog, cgroup, kind, 0)))
            probe = socket.socket()
            try:
                self._netns = probe.getsockopt(socket.SOL_SOCKET, _SO_NETNS_COOKIE, 8)
            finally:
                probe.close()
        except OSError as e:
            self.close()
            raise SocketLBUnavailable(e.errno, f"connect-time balancing unavailable: {e.strerror}") from None
        self._served: dict[bytes, tuple[int, int, tuple[tuple[str, int], ...]]] = {}
        """service key → (first slot, run length, endpoints written)."""
        self._next = 0
        self._spare: dict[int, list[tuple[float, int]]] = {}
        """run length → (reusable after, first slot) of runs given up."""

    def _map(self, kind: int, key: int, value: int, entries: int) -> int:
        fd = _bpf(_BPF_MAP_CREATE, struct.pack("<IIIII", kind, key, value, entries, 0))
        self._fds.append(fd)
        return fd

    def _load(self, code: bytes, attach: int) -> int:
        insns = ctypes.create_string_buffer(code, len(code))
        lic = ctypes.create_string_buffer(b"Dual MIT/GPL")
        fd = _bpf(_BPF_PROG_LOAD, struct.pack(
            "<IIQQIIQII16sII", _PROG_CGROUP_SOCK_ADDR, len(code) // 8, ctypes.addressof(insns),
            ctypes.addressof(lic), 0, 0, 0, 0, 0, b"isthmus_socklb", 0, attach))
        self._fds.append(fd)
        return fd

    def close(self) -> None:
        """Detach the programs (closing their links) and free the maps."""
        for fd in reversed(self._fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []

    def _key(self, ip: str, port: int) -> bytes:
        return self._netns + _addr(ip, port)

    def _op(self, cmd: int, fd: int, key: bytes, value: bytes | None = None, flags: int = 0) -> None:
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(value, len(value)) if value is not None else None
        _bpf(cmd, struct.pack("<IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v) if v is not None else 0,
                              flags))

    def _take(self, run: int) -> int:
        spare = self._spare.get(run)
        if spare and spare[0][0] <= time.monotonic():
            return spare.pop(0)[1]
        if self._next + run > MAX_SLOTS:
            raise OSError(28, "connect-time balancing: endpoint slots full")
        first, self._next = self._next, self._next + run
        return first

    def _give(self, first: int, run: int) -> None:
        self._spare.setdefault(run, []).append((time.monotonic() + QUARANTINE, first))

    def serve(self, ip: str, port: int, endpoints: tuple[tuple[str, int], ...]) -> None:
        """Balance connect()s to ip:port over `endpoints` (IPv4, at least one). OSError if the kernel
        refuses an update; the service is then left to the listener."""
        key = self._key(ip, port)
        now = self._served.get(key)
        if now is not None and now[2] == endpoints:
            return
        n = len(endpoints)
        if now is not None and n <= now[1]:
            first, run = now[0], now[1]
            if n < len(now[2]):  # shrink: stop picking the slots that go away first
                self._op(_BPF_MAP_UPDATE, self._services, key, struct.pack("<II", n, first))
            self._write(first, endpoints)
            self._op(_BPF_MAP_UPDATE, self._services, key, struct.pack("<II", n, first))
        else:
            run = 1 << max(n - 1, 0).bit_length()
            first = self._take(run)
            self._write(first, endpoints)
            self._op(_BPF_MAP_UPDATE, self._services, key, struct.pack("<II", n, first))
            if now is not None:
                self._give(now[0], now[1])
            else:
                try:
                    self._op(_BPF_MAP_UPDATE, self._counts, key, struct.pack("<Q", 0), _BPF_NOEXIST)
                except FileExistsError:
                    pass
        self._served[key] = (first, run, endpoints)

    def _write(self, first: int, endpoints: tuple[tuple[str, int], ...]) -> None:
        for i, (host, port) in enumerate(endpoints):
            self._op(_BPF_MAP_UPDATE, self._slots, struct.pack("<I", first + i), _addr(host, port))

    def forget(self, ip: str, port: int) -> None:
        """Leave ip:port to the listener again."""
        key = self._key(ip, port)
        now = self._served.pop(key, None)
        if now is None:
            return
        for fd in (self._services, self._counts):
            try:
                self._op(_BPF_MAP_DELETE, fd, key)
            except FileNotFoundError:
                pass
        self._give(now[0], now[1])

    def connections(self, ip: str, port: int) -> int:
        """Connections to ip:port balanced since it was served or its count was reset."""
        key = self._key(ip, port)
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(8)
        try:
            _bpf(_BPF_MAP_LOOKUP, struct.pack("<IIQQQ", self._counts, 0, ctypes.addressof(k), ctypes.addressof(v), 0))
        except FileNotFoundError:
            return 0
        return int(struct.unpack("<Q", v.raw)[0])

    def reset_count(self, ip: str, port: int) -> None:
        """Start ip:port's count again (the caller kept what it was)."""
        try:
            self._op(_BPF_MAP_UPDATE, self._counts, self._key(ip, port), struct.pack("<Q", 0))
        except OSError:
            pass

    def served(self) -> int:
        return len(self._served)


def open_socket_lb() -> SocketLB | None:
    """A new SocketLB, or None (logged) where the kernel refuses it."""
    try:
        return SocketLB()
    except SocketLBUnavailable as e:
        log.info("connect-time balancing off: the listeners relay every connection", extra={"reason": e.strerror})
        return None
