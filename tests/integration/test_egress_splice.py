"""egress/splice.py on both event loops: a client that sends and half-closes before its relay is
linked loses nothing (uvloop reads a new connection once even when it is paused at once)."""

from __future__ import annotations

import asyncio

import pytest

from isthmus.egress.splice import Pipe, link
from isthmus.runtime.loop import loop_factory


async def _scenario() -> bytes:
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[Pipe] = loop.create_future()

    class Paused(Pipe):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            transport.pause_reading()  # type: ignore[attr-defined]  # as the forwarder, until the gateway answers
            accepted.set_result(self)

    def client_side() -> Pipe:
        return Paused()

    server = await loop.create_server(client_side, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    upstream_got = bytearray()
    upstream_eof = asyncio.Event()

    class Upstream(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            upstream_got.extend(data)

        def eof_received(self) -> bool:
            upstream_eof.set()
            return False

    up_server = await loop.create_server(Upstream, "127.0.0.1", 0)
    up_port = up_server.sockets[0].getsockname()[1]

    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"request before the relay exists\n")
    writer.write_eof()
    client = await accepted
    await asyncio.sleep(0.2)  # the EOF arrives while nothing is linked
    assert not client.closed
    up = Pipe()
    await loop.create_connection(lambda: up, "127.0.0.1", up_port)
    link(client, up)
    async with asyncio.timeout(5):
        await upstream_eof.wait()
    writer.close()
    server.close()
    up_server.close()
    return bytes(upstream_got)


@pytest.mark.parametrize("choice", ["asyncio", "uvloop"])
def test_early_bytes_and_eof_reach_the_relay(choice: str) -> None:
    if choice == "uvloop":
        pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        assert runner.run(_scenario()) == b"request before the relay exists\n"


