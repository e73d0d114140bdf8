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

import logging
import os
import socket
import struct
import time

from isthmus.proxy import bpf

__all__ = ["SocketLB", "SocketLBUnavailable", "open_socket_lb"]

log = logging.getLogger(__name__)

_HASH, _ARRAY, _LRU_HASH = 1, 2, 9
_PROG_CGROUP_SOCK_ADDR = 18
_INET4_CONNECT, _INET4_GETPEERNAME = 10, 29
_SO_NETNS_COOKIE = 71
# struct bpf_sock_addr offsets (uapi/linux/bpf.h)
_USER_IP4, _USER_PORT, _PROTOCOL = 4, 24, 36

MAX_SERVICES = 16384
MAX_SLOTS = 65536
MAX_PEERS = 65536
QUARANTINE = 2.0
"""Seconds a given-up run of slots waits before reuse (a connect() may still be reading it)."""


class SocketLBUnavailable(OSError):
    """The kernel refused a map, a program or the cgroup attachment."""


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
    return bpf.assemble([
        bpf.insn(bpf.MOV64_REG, bpf.R6, bpf.R1),
        bpf.insn(bpf.LDX_W, bpf.R2, bpf.R6, _PROTOCOL), bpf.insn(bpf.JNE_IMM, bpf.R2, off=bpf.END, imm=socket.IPPROTO_TCP),
        bpf.insn(bpf.MOV64_REG, bpf.R1, bpf.R6), bpf.insn(bpf.CALL, imm=bpf.NETNS_COOKIE), bpf.insn(bpf.STX_DW, bpf.R10, bpf.R0, -16),
        bpf.insn(bpf.LDX_W, bpf.R2, bpf.R6, _USER_IP4), bpf.insn(bpf.STX_W, bpf.R10, bpf.R2, -8),
        bpf.insn(bpf.LDX_W, bpf.R2, bpf.R6, _USER_PORT), bpf.insn(bpf.STX_W, bpf.R10, bpf.R2, -4),
        *bpf.ld_map(bpf.R1, services), bpf.insn(bpf.MOV64_REG, bpf.R2, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R2, imm=-16),
        bpf.insn(bpf.CALL, imm=bpf.LOOKUP), bpf.insn(bpf.JEQ_IMM, bpf.R0, off=bpf.END, imm=0),
        bpf.insn(bpf.LDX_W, bpf.R7, bpf.R0, 0), bpf.insn(bpf.LDX_W, bpf.R8, bpf.R0, 4),
        bpf.insn(bpf.JEQ_IMM, bpf.R7, off=bpf.END, imm=0),
        bpf.insn(bpf.CALL, imm=bpf.PRANDOM), bpf.insn(bpf.MOD32_REG, bpf.R0, bpf.R7), bpf.insn(bpf.ADD32_REG, bpf.R0, bpf.R8),
        bpf.insn(bpf.STX_W, bpf.R10, bpf.R0, -20),
        *bpf.ld_map(bpf.R1, slots), bpf.insn(bpf.MOV64_REG, bpf.R2, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R2, imm=-20),
        bpf.insn(bpf.CALL, imm=bpf.LOOKUP), bpf.insn(bpf.JEQ_IMM, bpf.R0, off=bpf.END, imm=0),
        bpf.insn(bpf.LDX_W, bpf.R2, bpf.R0, 0), bpf.insn(bpf.STX_W, bpf.R6, bpf.R2, _USER_IP4),
        bpf.insn(bpf.LDX_W, bpf.R2, bpf.R0, 4), bpf.insn(bpf.STX_W, bpf.R6, bpf.R2, _USER_PORT),
        *bpf.ld_map(bpf.R1, counts), bpf.insn(bpf.MOV64_REG, bpf.R2, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R2, imm=-16),
        bpf.insn(bpf.CALL, imm=bpf.LOOKUP), bpf.insn(bpf.JEQ_IMM, bpf.R0, off=2, imm=0),
        bpf.insn(bpf.MOV64_IMM, bpf.R1, imm=1), bpf.insn(bpf.ATOMIC_ADD_DW, bpf.R0, bpf.R1, 0),
        bpf.insn(bpf.MOV64_REG, bpf.R1, bpf.R6), bpf.insn(bpf.CALL, imm=bpf.SOCKET_COOKIE), bpf.insn(bpf.STX_DW, bpf.R10, bpf.R0, -32),
        *bpf.ld_map(bpf.R1, peers), bpf.insn(bpf.MOV64_REG, bpf.R2, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R2, imm=-32),
        bpf.insn(bpf.MOV64_REG, bpf.R3, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R3, imm=-8), bpf.insn(bpf.MOV64_IMM, bpf.R4, imm=0),
        bpf.insn(bpf.CALL, imm=bpf.UPDATE),
    ])


def getpeername_program(peers: int) -> bytes:
    """    svc = lookup(&peers, bpf_get_socket_cookie(ctx));
        if (svc) { ctx->user_ip4 = svc->ip4; ctx->user_port = svc->port; }
        return 1;"""
    return bpf.assemble([
        bpf.insn(bpf.MOV64_REG, bpf.R6, bpf.R1),
        bpf.insn(bpf.MOV64_REG, bpf.R1, bpf.R6), bpf.insn(bpf.CALL, imm=bpf.SOCKET_COOKIE), bpf.insn(bpf.STX_DW, bpf.R10, bpf.R0, -8),
        *bpf.ld_map(bpf.R1, peers), bpf.insn(bpf.MOV64_REG, bpf.R2, bpf.R10), bpf.insn(bpf.ADD64_IMM, bpf.R2, imm=-8),
        bpf.insn(bpf.CALL, imm=bpf.LOOKUP), bpf.insn(bpf.JEQ_IMM, bpf.R0, off=bpf.END, imm=0),
        bpf.insn(bpf.LDX_W, bpf.R2, bpf.R0, 0), bpf.insn(bpf.STX_W, bpf.R6, bpf.R2, _USER_IP4),
        bpf.insn(bpf.LDX_W, bpf.R2, bpf.R0, 4), bpf.insn(bpf.STX_W, bpf.R6, bpf.R2, _USER_PORT),
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
                self._fds.append(bpf.syscall(bpf.LINK_CREATE, struct.pack("<IIII", prog, cgroup, kind, 0)))
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
        fd = bpf.map_create(kind, key, value, entries)
        self._fds.append(fd)
        return fd

    def _load(self, code: bytes, attach: int) -> int:
        fd = bpf.load(_PROG_CGROUP_SOCK_ADDR, code, attach, b"isthmus_socklb")
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
                bpf.map_update(self._services, key, struct.pack("<II", n, first))
            self._write(first, endpoints)
            bpf.map_update(self._services, key, struct.pack("<II", n, first))
        else:
            run = 1 << max(n - 1, 0).bit_length()
            first = self._take(run)
            self._write(first, endpoints)
            bpf.map_update(self._services, key, struct.pack("<II", n, first))
            if now is not None:
                self._give(now[0], now[1])
            else:
                try:
                    bpf.map_update(self._counts, key, struct.pack("<Q", 0), bpf.NOEXIST)
                except FileExistsError:
                    pass
        self._served[key] = (first, run, endpoints)

    def _write(self, first: int, endpoints: tuple[tuple[str, int], ...]) -> None:
        for i, (host, port) in enumerate(endpoints):
            bpf.map_update(self._slots, struct.pack("<I", first + i), _addr(host, port))

    def forget(self, ip: str, port: int) -> None:
        """Leave ip:port to the listener again."""
        key = self._key(ip, port)
        now = self._served.pop(key, None)
        if now is None:
            return
        for fd in (self._services, self._counts):
            try:
                bpf.map_delete(fd, key)
            except FileNotFoundError:
                pass
        self._give(now[0], now[1])

    def connections(self, ip: str, port: int) -> int:
        """Connections to ip:port balanced since it was served or its count was reset."""
        try:
            value = bpf.map_lookup(self._counts, self._key(ip, port), 8)
        except FileNotFoundError:
            return 0
        return int(struct.unpack("<Q", value)[0])

    def reset_count(self, ip: str, port: int) -> None:
        """Start ip:port's count again (the caller kept what it was)."""
        try:
            bpf.map_update(self._counts, self._key(ip, port), struct.pack("<Q", 0))
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
