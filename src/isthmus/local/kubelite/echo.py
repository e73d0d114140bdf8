"""The echo workload: real servers on a Pod's IP, so traffic through Isthmus can be seen arriving.

Every TCP container port speaks HTTP/1.1 (keep-alive, any method and path) and answers JSON
naming the Pod, its cluster, and the peer address it saw — which is what a test or a demo
needs to tell which Pod of which cluster a request reached, and from where. Every UDP port
answers each datagram with the same JSON minus the HTTP fields.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

__all__ = ["EchoIdentity", "EchoServer", "echo_body"]

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 1.0


@dataclass(frozen=True, slots=True)
class EchoIdentity:
    pod: str
    namespace: str
    cluster: str


def echo_body(who: EchoIdentity, peer: Any, **http: Any) -> dict[str, Any]:
    """The JSON answer: identity, ``client`` = "ip:port" of the peer, plus the HTTP fields given."""
    client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer or "")
    return {"pod": who.pod, "namespace": who.namespace, "cluster": who.cluster, "client": client, **http}


class _UdpEcho(asyncio.DatagramProtocol):
    def __init__(self, who: EchoIdentity) -> None:
        self.who = who
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # selector transports don't subclass it

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self.transport is not None:
            self.transport.sendto(json.dumps(echo_body(self.who, addr)).encode(), addr)

    def error_received(self, exc: Exception) -> None:  # e.g. ICMP port unreachable from a gone client
        log.debug("udp echo error", extra={"pod": self.who.pod, "error": str(exc)})


class EchoServer:
    """The servers of one Pod: ``start()`` binds every port or none (OSError), ``stop()`` closes all."""

    def __init__(self, who: EchoIdentity, ip: str, ports: Sequence[tuple[int, str]]) -> None:
        self.who = who
        self.ip = ip
        self.ports = tuple(sorted({p for p in ports if p[1] in ("TCP", "UDP")}))  # SCTP: nothing to serve
        self._web: list[tuple[web.Server, asyncio.Server]] = []
        self._udp: list[asyncio.DatagramTransport] = []

    @property
    def listening(self) -> bool:
        return len(self._web) + len(self._udp) == len(self.ports)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            for port, protocol in self.ports:
                if protocol == "UDP":
                    transport, _ = await loop.create_datagram_endpoint(
                        lambda: _UdpEcho(self.who), local_addr=(self.ip, port)
                    )
                    self._udp.append(transport)
                else:
                    handler = web.Server(self._handle, access_log=None)
                    server = await loop.create_server(handler, self.ip, port, reuse_address=True)
                    self._web.append((handler, server))
        except OSError:
            await self.stop()
            raise

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()  # drain the body so the connection can be kept alive
        peer = request.transport.get_extra_info("peername") if request.transport else None
        headers: dict[str, str] = {}
        for k, v in request.headers.items():
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        body = echo_body(self.who, peer, method=request.method, path=request.raw_path, headers=headers)
        return web.json_response(body)

    async def stop(self) -> None:
        web_servers, self._web = self._web, []
        udp, self._udp = self._udp, []
        for transport in udp:
            transport.close()
        for handler, server in web_servers:
            server.close()
            await handler.shutdown(SHUTDOWN_GRACE)  # also closes kept-alive connections
            await server.wait_closed()
