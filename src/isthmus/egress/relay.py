"""The userspace relay between forwarder and gateway, and the socket helpers both ends share.

A relay is one TCP connection per client flow, opened with one header line:

    ISTHMUS/1 EGRESS  <TCP|UDP> <sourceIP> <targetIP> <port>\\n   forwarder → gateway
    ISTHMUS/1 INGRESS <TCP|UDP> <sourceIP> <port> <peerIP>\\n     gateway → forwarder

answered `OK\\n` once the far side is connected, or `ERR <why>\\n` and closed. Then TCP flows are
plain bytes both ways; UDP flows are datagrams framed with a 2-byte length. The receiving end checks
the relay's peer address against its rules (fail closed): the header says what is wanted, the
rules say who may want it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from isthmus.runtime.sockets import connect

MAGIC = "ISTHMUS/1"
MAX_HEADER = 256
CONNECT_TIMEOUT = 5.0
HEADER_TIMEOUT = 5.0
UDP_IDLE_TIMEOUT = 60.0
READ_SIZE = 256 * 1024
IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h: pick the port at connect, so one source address serves 64k peers


class RelayError(Exception):
    """A relay header or answer that is not what the protocol allows."""


@dataclass(frozen=True)
class Header:
    kind: str  # EGRESS | INGRESS
    protocol: str  # TCP | UDP
    source_ip: str
    a: str  # EGRESS: targetIP; INGRESS: port
    b: str  # EGRESS: port;     INGRESS: peerIP

    def encode(self) -> bytes:
        return f"{MAGIC} {self.kind} {self.protocol} {self.source_ip} {self.a} {self.b}\n".encode()


def egress_header(protocol: str, source_ip: str, target_ip: str, port: int) -> Header:
    return Header("EGRESS", protocol, source_ip, target_ip, str(port))


def ingress_header(protocol: str, source_ip: str, port: int, peer_ip: str) -> Header:
    return Header("INGRESS", protocol, source_ip, str(port), peer_ip)


def parse_header(line: bytes) -> Header:
    parts = line.decode("ascii", "replace").split()
    if len(parts) != 6 or parts[0] != MAGIC or parts[1] not in ("EGRESS", "INGRESS") or parts[2] not in ("TCP", "UDP"):
        raise RelayError(f"not a relay header: {line[:80]!r}")
    h = Header(*parts[1:])
    try:
        ipaddress.ip_address(h.source_ip)
        if h.kind == "EGRESS":
            ipaddress.ip_address(h.a)
            port = int(h.b)
        else:
            ipaddress.ip_address(h.b)
            port = int(h.a)
    except ValueError as err:
        raise RelayError(f"bad relay header: {err}") from None
    if not 0 < port < 65536:
        raise RelayError(f"bad port {port}")
    return h


async def read_header(reader: asyncio.StreamReader) -> Header:
    async with asyncio.timeout(HEADER_TIMEOUT):
        line = await reader.readuntil(b"\n")
    if len(line) > MAX_HEADER:
        raise RelayError("header too long")
    return parse_header(line)


UNREACHABLE = "cannot reach"
"""How the gateway's answer starts when it could not connect to the target (refused, or no answer:
also while the route back to a new leader's node is being moved)."""


async def answer(writer: asyncio.StreamWriter, error: str | None = None) -> None:
    writer.write(b"OK\n" if error is None else f"ERR {error}\n".encode())
    await writer.drain()


async def read_answer(reader: asyncio.StreamReader) -> None:
    async with asyncio.timeout(CONNECT_TIMEOUT + HEADER_TIMEOUT):
        line = await reader.readuntil(b"\n")
    if line != b"OK\n":
        raise RelayError(line.decode("ascii", "replace").strip() or "relay closed")


def split_host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


async def connected_socket(source_ip: str | None, host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket connected to host:port from `source_ip` (bound before connect, the
    port chosen at connect time). A bind that fails raises: never a connection from another address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if source_ip is not None:
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source_ip, 0))
        await connect(asyncio.get_running_loop(), sock, (host, port), CONNECT_TIMEOUT)
    except BaseException:
        sock.close()
        raise
    return sock


async def connect_from(source_ip: str | None, host: str,
                       port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over `connected_socket` (the relay's header exchange and UDP frames)."""
    sock = await connected_socket(source_ip, host, port)
    try:
        return await asyncio.open_connection(sock=sock, limit=READ_SIZE)
    except BaseException:
        sock.close()
        raise


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(READ_SIZE):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()


async def pipe(a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
               b: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    """Copy both ways until both sides are done; then close both."""
    try:
        await asyncio.gather(_copy(a[0], b[1]), _copy(b[0], a[1]))
    finally:
        for w in (a[1], b[1]):
            close(w)


def close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


def refuse(writer: asyncio.StreamWriter) -> None:
    """Reset, not FIN: the client sees its connection refused at once."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def peer_ip(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if peer else ""


# --- UDP over the relay ---------------------------------------------------------------------------


def frame(payload: bytes) -> bytes:
    return struct.pack("!H", len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack("!H", await reader.readexactly(2))
    return await reader.readexactly(size)


async def pump_frames(reader: asyncio.StreamReader, idle: float, last: Callable[[], float],
                      deliver: Callable[[bytes], None]) -> None:
    """Deliver the relay's frames until it ends, or until nothing moved either way for `idle`
    seconds (`last()`: when something last did)."""
    loop = asyncio.get_running_loop()
    try:
        while (remaining := idle - (loop.time() - last())) > 0:
            try:
                async with asyncio.timeout(remaining):
                    payload = await read_frame(reader)
            except TimeoutError:
                continue
            deliver(payload)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass


class _Upstream(asyncio.DatagramProtocol):
    def __init__(self, writer: asyncio.StreamWriter, touch: Callable[[], None]) -> None:
        self.writer = writer
        self.touch = touch

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.touch()
        self.writer.write(frame(data))


async def bridge_udp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source_ip: str | None,
                     host: str, port: int, idle: float = UDP_IDLE_TIMEOUT) -> None:
    """Relay side of a UDP flow: frames from the relay go out as datagrams from `source_ip` to
    host:port; datagrams back come in as frames. Ends after `idle` seconds without traffic."""
    loop = asyncio.get_running_loop()
    last = [loop.time()]

    def touch() -> None:
        last[0] = loop.time()

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if source_ip is not None:
            sock.bind((source_ip, 0))
        sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    transport, _ = await loop.create_datagram_endpoint(lambda: _Upstream(writer, touch), sock=sock)

    def send(payload: bytes) -> None:
        touch()
        transport.sendto(payload)

    try:
        await answer(writer)
        await pump_frames(reader, idle, lambda: last[0], send)
    except ConnectionError:
        pass
    finally:
        transport.close()
        close(writer)


OpenRelay = Callable[[tuple[str, int]], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]]
"""For a new UDP peer: an open relay (header sent, OK read), or None to refuse the peer."""


class _Flow:
    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None
        self.queue: list[bytes] = []
        self.last = 0.0
        self.task: asyncio.Task[None] | None = None


class UdpFlows(asyncio.DatagramProtocol):
    """Listening side of UDP relays: one relay per peer address, opened on its first datagram,
    closed after `idle` seconds without traffic."""

    def __init__(self, open_relay: OpenRelay, idle: float = UDP_IDLE_TIMEOUT, queue_max: int = 64) -> None:
        self.open_relay = open_relay
        self.idle = idle
        self.queue_max = queue_max
        self.flows: dict[tuple[str, int], _Flow] = {}
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        addr = (addr[0], addr[1])
        flow = self.flows.get(addr)
        loop = asyncio.get_running_loop()
        if flow is None:
            flow = self.flows[addr] = _Flow()
            flow.task = loop.create_task(self._run(addr, flow))
        flow.last = loop.time()
        if flow.writer is not None:
            flow.writer.write(frame(data))
        elif len(flow.queue) < self.queue_max:
            flow.queue.append(data)

    async def _run(self, addr: tuple[str, int], flow: _Flow) -> None:
        loop = asyncio.get_running_loop()
        try:
            opened = await self.open_relay(addr)
            if opened is None:
                return
            reader, writer = opened
            flow.writer = writer
            for data in flow.queue:
                writer.write(frame(data))
            flow.queue.clear()
            def send(payload: bytes) -> None:
                flow.last = loop.time()
                if self.transport is not None:
                    self.transport.sendto(payload, addr)

            try:
                await pump_frames(reader, self.idle, lambda: flow.last, send)
            finally:
                close(writer)
        except Exception:
            pass
        finally:
            self.flows.pop(addr, None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        for flow in list(self.flows.values()):
            if flow.task is not None:
                flow.task.cancel()
            if flow.writer is not None:
                flow.writer.transport.abort()
        self.flows.clear()
