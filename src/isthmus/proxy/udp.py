"""UDP listener: one upstream socket per client address ("flow"), replies sent from the listener.

Each flow has its own connected upstream socket, so the backend's replies are told apart by the
socket they arrive on and relayed to the right client from the listening socket — the client sees
them come from the virtual address it sent to. Upstream sockets are plain non-blocking sockets
read through `loop.add_reader`: opening a flow is synchronous (a UDP connect sends nothing), so the
first datagram goes out at once with no task. Flows idle for `idle_timeout` are closed; so are
flows whose backend left the endpoint set, and flows whose backend answered with an ICMP error
(the client's pin is dropped, so its next datagram opens a flow to another backend).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import cast

from isthmus.proxy.balancer import Balancer
from isthmus.proxy.metrics import ListenerStats
from isthmus.proxy.table import Backend
from isthmus.proxy.tcp import keep_client_address

__all__ = ["DEFAULT_IDLE_TIMEOUT", "DEFAULT_MAX_FLOWS", "UdpListener"]

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT = 30.0
DEFAULT_MAX_FLOWS = 16384
"""Flows per listener; each holds a file descriptor, so a flood of source addresses is capped."""
MAX_DATAGRAM = 65535
_READS_PER_WAKEUP = 64
"""Replies relayed per readiness callback before yielding to other flows."""


class _Flow:
    __slots__ = ("addr", "backend", "fd", "last", "listener", "sock")

    def __init__(
        self, listener: UdpListener, addr: tuple[str, int], backend: Backend, sock: socket.socket
    ) -> None:
        self.listener = listener
        self.addr = addr
        self.backend = backend
        self.sock = sock
        self.fd = sock.fileno()
        self.last = time.monotonic()

    def readable(self) -> None:
        listener = self.listener
        front = listener.transport
        stats = listener.stats
        for _ in range(_READS_PER_WAKEUP):
            try:
                data = self.sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:  # ICMP port unreachable and friends
                stats.upstream_error += 1
                log.debug(
                    "backend error",
                    extra={"backend": f"{self.backend.host}:{self.backend.port}", "error": str(e)},
                )
                listener.close_flow(self, failed=True)
                return
            if front is None:
                return
            front.sendto(data, self.addr)
            stats.datagrams_out += 1
        self.last = time.monotonic()


class UdpListener(asyncio.DatagramProtocol):
    """Serves one bound UDP socket; the balancer and stats are swapped by the proxy on updates."""

    def __init__(
        self,
        balancer: Balancer,
        stats: ListenerStats,
        *,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_flows: int = DEFAULT_MAX_FLOWS,
    ) -> None:
        self.balancer = balancer
        self.stats = stats
        self.idle_timeout = idle_timeout
        self.max_flows = max_flows
        self.flows: dict[tuple[str, int], _Flow] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = self._loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, sock=sock)
        self._schedule_sweep()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # 3.11's is not a subclass

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        stats = self.stats
        stats.datagrams_in += 1
        flow = self.flows.get(addr)
        if flow is None:
            flow = self._open(addr)
            if flow is None:
                return
        else:
            flow.last = time.monotonic()
        try:
            flow.sock.send(data)
        except (BlockingIOError, InterruptedError):
            pass  # the socket buffer is full: drop, as the network would
        except OSError:
            stats.upstream_error += 1
            self.close_flow(flow, failed=True)

    def _open(self, addr: tuple[str, int]) -> _Flow | None:
        stats = self.stats
        if len(self.flows) >= self.max_flows:
            stats.flow_limit += 1
            return None
        backend = self.balancer.pick(addr[0])
        if backend is None:
            stats.no_endpoints += 1
            return None
        family = socket.AF_INET6 if ":" in backend.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            keep_client_address(sock, addr[0], backend.host, stream=False)
            sock.connect(backend)
        except OSError:
            sock.close()
            stats.connect_failed += 1
            self.balancer.forget(addr[0], backend)
            return None
        flow = _Flow(self, addr, backend, sock)
        assert self._loop is not None
        self._loop.add_reader(flow.fd, flow.readable)
        self.flows[addr] = flow
        stats.connections += 1
        stats.active += 1
        return flow

    def close_flow(self, flow: _Flow, failed: bool = False) -> None:
        if self.flows.get(flow.addr) is not flow:
            return
        del self.flows[flow.addr]
        self.stats.active -= 1
        if self._loop is not None:
            self._loop.remove_reader(flow.fd)
        flow.sock.close()
        if failed:
            self.balancer.forget(flow.addr[0], flow.backend)

    def backends_changed(self) -> None:
        """Close flows to backends that left the set, so their clients move on with their next datagram."""
        members = set(self.balancer.backends)
        for flow in [f for f in self.flows.values() if f.backend not in members]:
            self.close_flow(flow)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP listener error", extra={"error": str(exc)})

    def _schedule_sweep(self) -> None:
        if self._loop is not None:
            interval = max(0.2, min(self.idle_timeout / 4, 5.0))
            self._sweeper = self._loop.call_later(interval, self._sweep)

    def _sweep(self) -> None:
        deadline = time.monotonic() - self.idle_timeout
        for flow in [f for f in self.flows.values() if f.last < deadline]:
            self.close_flow(flow)
        self._schedule_sweep()

    def close(self) -> None:
        """Stop listening and close every flow (a UDP flow has no life without its listener)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for flow in list(self.flows.values()):
            self.close_flow(flow)
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def abort_all(self) -> None:
        for flow in list(self.flows.values()):
            self.close_flow(flow)
