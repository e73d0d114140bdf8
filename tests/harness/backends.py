"""Small TCP/UDP backends for the proxy tests, each answering with its own name and the client IP."""

from __future__ import annotations

import asyncio
import random
import socket
from typing import cast


def random_net() -> int:
    """A /24 index for one test, so concurrent runs do not share addresses."""
    return random.randint(1, 254)


class TcpEcho:
    """Line echo: each line `x` is answered `name|client_ip|x`; on EOF it says `bye name` and closes."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name, self.host, self.port = name, host, port
        self.server: asyncio.Server | None = None
        self.accepted = 0

    async def start(self) -> TcpEcho:
        self.server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        peer = writer.get_extra_info("peername")[0]
        try:
            while line := await reader.readline():
                writer.write(f"{self.name}|{peer}|".encode() + line)
                await writer.drain()
            writer.write(f"bye {self.name}\n".encode())
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


class UdpEcho(asyncio.DatagramProtocol):
    """Answers each datagram `x` with `name|client_ip|x`."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name, self.host, self.port = name, host, port
        self.transport: asyncio.DatagramTransport | None = None
        self.clients: set[tuple[str, int]] = set()

    async def start(self) -> UdpEcho:
        await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: self, local_addr=(self.host, self.port)
        )
        return self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # 3.11's is not a subclass

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.clients.add(addr)
        assert self.transport is not None
        self.transport.sendto(f"{self.name}|{addr[0]}|".encode() + data, addr)

    async def stop(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def tcp_ask(
    host: str,
    port: int,
    line: str = "hi",
    source: str | None = None,
    timeout: float = 5,  # noqa: ASYNC109
) -> str:
    """One connection, one line; the backend's answer (`name|client_ip|line`)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0) if source else None)
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            answer = await reader.readline()
            if not answer:
                raise ConnectionResetError("closed without an answer")
            return answer.decode().rstrip("\n")
        finally:
            writer.close()


async def udp_ask(
    host: str,
    port: int,
    data: str = "hi",
    source: str | None = None,
    timeout: float = 2,  # noqa: ASYNC109
) -> str:
    """One datagram from a fresh socket (a new flow), one answer."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        sock.bind((source or "127.0.0.1", 0))
        sock.connect((host, port))
        sock.send(data.encode())
        async with asyncio.timeout(timeout):
            answer = await loop.sock_recv(sock, 65535)
        return answer.decode()
    finally:
        sock.close()

