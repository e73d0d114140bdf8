"""The echo workload: real servers on a Pod's IP, so traffic through Isthmus can be seen arriving.

Every TCP container port speaks HTTP/1.1 (keep-alive, any method and path) and answers JSON
naming the Pod, its cluster, and the peer address it saw — which is what a test or a demo
needs to tell which Pod of which cluster a request reached, and from where. Every UDP port
answers each datagram with the same JSON minus the HTTP fields.

What a container would print goes to ``say(port, protocol, line)``: a line per port once
listening and one per request or datagram (the Pod's logs, see logs.py).

Told to terminate (the kubelet's SIGTERM, see :meth:`EchoServer.terminate`), it drains as a
well-behaved server does: a short lame duck in which it still accepts (a consumer that has not yet
seen its endpoint withdrawn is still served), every answer closing its connection; then it stops
accepting, and each kept-alive connection is closed after its next answer, or once idle.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

__all__ = ["EchoIdentity", "EchoServer", "Say", "echo_body"]

Say = Callable[[int, str, str], None]
"""(port, protocol, line): a line of output of the container serving that port."""

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 1.0
LAME_DUCK = 1.0
"""Seconds a terminating server still accepts connections (each answered with Connection: close)."""
IDLE_CLOSE = 1.0
"""Seconds without a request after which a terminating server closes a kept-alive connection: a
client sending more often gets an answer saying ``Connection: close`` first (no race)."""


@dataclass(frozen=True, slots=True)
class EchoIdentity:
    pod: str
    namespace: str
    cluster: str


def echo_body(who: EchoIdentity, peer: Any, **http: Any) -> dict[str, Any]:
    """The JSON answer: identity, ``client`` = "ip:port" of the peer, plus the HTTP fields given."""
    client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer or "")
    return {"pod": who.pod, "namespace": who.namespace, "cluster": who.cluster, "client": client, **http}


def _silent(port: int, protocol: str, line: str) -> None:
    pass


def _peer(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer or "-")


class _UdpEcho(asyncio.DatagramProtocol):
    def __init__(self, who: EchoIdentity, port: int, say: Say) -> None:
        self.who = who
        self.port = port
        self.say = say
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # selector transports don't subclass it

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self.transport is not None:
            self.transport.sendto(json.dumps(echo_body(self.who, addr)).encode(), addr)
            self.say(self.port, "UDP", f"{_peer(addr)} UDP datagram of {len(data)} bytes answered")

    def error_received(self, exc: Exception) -> None:  # e.g. ICMP port unreachable from a gone client
        log.debug("udp echo error", extra={"pod": self.who.pod, "error": str(exc)})


class EchoServer:
    """The servers of one Pod: ``start()`` binds every port or none (OSError), ``stop()`` closes all."""

    def __init__(
        self, who: EchoIdentity, ip: str, ports: Sequence[tuple[int, str]], say: Say | None = None
    ) -> None:
        self.who = who
        self.ip = ip
        self.say = say or _silent
        self.ports = tuple(sorted({p for p in ports if p[1] in ("TCP", "UDP")}))  # SCTP: nothing to serve
        self._web: list[tuple[web.Server, asyncio.Server]] = []
        self._udp: list[asyncio.DatagramTransport] = []
        self.draining = False
        self._busy: dict[object, int] = {}
        """Requests in progress per connection (its transport)."""
        self._last: dict[object, float] = {}
        """When each connection's last answer was sent (monotonic)."""

    @property
    def listening(self) -> bool:
        return len(self._web) + len(self._udp) == len(self.ports)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            for port, protocol in self.ports:
                if protocol == "UDP":
                    transport, _ = await loop.create_datagram_endpoint(
                        lambda port=port: _UdpEcho(self.who, port, self.say),  # type: ignore[misc]
                        local_addr=(self.ip, port),
                    )
                    self._udp.append(transport)
                else:
                    handler = web.Server(self._handle, access_log=None)
                    server = await loop.create_server(handler, self.ip, port, reuse_address=True)
                    self._web.append((handler, server))
        except OSError:
            await self.stop()
            raise
        for port, protocol in self.ports:
            self.say(port, protocol, f"echo {self.who.namespace}/{self.who.pod} ({self.who.cluster}) "
                     f"listening on {self.ip}:{port}/{protocol}")

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        conn = request.transport
        self._busy[conn] = self._busy.get(conn, 0) + 1
        try:
            resp = await self._answer(request)
            if self.draining:
                resp.force_close()  # the client reconnects, to an endpoint still ready
            return resp
        finally:
            self._busy[conn] -= 1
            if not self._busy[conn]:
                del self._busy[conn]
            if self.draining:
                self._last[conn] = time.monotonic()

    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()  # drain the body so the connection can be kept alive
        peer = request.transport.get_extra_info("peername") if request.transport else None
        headers: dict[str, str] = {}
        for k, v in request.headers.items():
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        body = echo_body(self.who, peer, method=request.method, path=request.raw_path, headers=headers)
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        port = int(sock[1]) if isinstance(sock, tuple) and len(sock) >= 2 else 0
        version = f"HTTP/{request.version.major}.{request.version.minor}"
        self.say(port, "TCP", f'{_peer(peer)} "{request.method} {request.raw_path} {version}" 200')
        return web.json_response(body)

    async def terminate(self, grace: float) -> None:
        """Drain, then stop, within ``grace`` seconds (what the kubelet's SIGTERM asks; whatever is
        left then is closed, as SIGKILL would)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(grace, 0.0)
        self.draining = True
        await asyncio.sleep(max(0.0, min(LAME_DUCK, deadline - loop.time())))
        for _, server in self._web:
            server.close()  # no new connections; the open ones stay
        started = time.monotonic()
        while loop.time() < deadline:
            open_ = [c for handler, _ in self._web for c in handler.connections]
            if not open_:
                break
            now = time.monotonic()
            for c in open_:
                t = c.transport
                if t is not None and not self._busy.get(t) and now - self._last.get(t, started) >= IDLE_CLOSE:
                    c.close()  # idle: closed between requests
            await asyncio.sleep(0.05)
        await self.stop()

    async def stop(self) -> None:
        self._busy.clear()
        self._last.clear()
        web_servers, self._web = self._web, []
        udp, self._udp = self._udp, []
        for transport in udp:
            transport.close()
        for handler, server in web_servers:
            server.close()
            await handler.shutdown(SHUTDOWN_GRACE)  # also closes kept-alive connections
            await server.wait_closed()
