"""TCP relaying with protocols rather than streams: the hot path of forwarder and gateway.

A `Pipe` is one connection. It starts in *line mode* when given `on_line` (a relay header, or the
`OK`/`ERR` answer to one): bytes are gathered until the first newline, then `on_line(pipe, line)`
decides. After `link(a, b)` bytes read on one side are written to the other from a read buffer
shared by every pipe of the process (the loop is single-threaded and a read is written on before
the next read happens), with flow control by pausing the reader whose peer's buffer is full. No
task per connection, no StreamReader: a new connection costs a few callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable

from isthmus.egress.relay import MAX_HEADER, READ_SIZE, connected_socket

_LINGER_RESET = struct.pack("ii", 1, 0)


class _Buffer:
    def __init__(self) -> None:
        self.view = memoryview(bytearray(READ_SIZE))

    def fresh(self) -> None:
        self.view = memoryview(bytearray(READ_SIZE))


_READ = _Buffer()

LineHandler = Callable[["Pipe", bytes], None]


class Pipe(asyncio.BufferedProtocol):
    __slots__ = ("closed", "eof", "held", "line", "on_close", "on_line", "peer", "transport")

    def __init__(self, on_line: LineHandler | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Pipe | None = None
        self.on_line = on_line
        self.line = bytearray()
        self.held = b""
        """Bytes read before the peer was linked (after a header, in the same segment)."""
        self.eof = False
        self.closed = False
        self.on_close: Callable[[Pipe], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a uvloop transport is not an asyncio.Transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ.view

    def buffer_updated(self, nbytes: int) -> None:
        data = _READ.view[:nbytes]
        if self.on_line is not None:
            self.line += data
            end = self.line.find(b"\n")
            if end < 0:
                if len(self.line) > MAX_HEADER:
                    self.reset()
                return
            line, rest = bytes(self.line[:end + 1]), bytes(self.line[end + 1:])
            handler, self.on_line, self.line = self.on_line, None, bytearray()
            self.held = rest
            handler(self, line)
            return
        peer = self.peer
        if peer is None or peer.transport is None:
            self.held += bytes(data)
            return
        out = peer.transport
        out.write(data)
        if out.get_write_buffer_size():
            _READ.fresh()  # the transport kept part of this buffer

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is None and self.on_line is None:
            # Not linked yet (a client that sent its request and half-closed while the relay is
            # being set up; uvloop reads even a paused new connection once): keep the half-open
            # connection, `link` passes the EOF on after the held bytes.
            return True
        if peer is None or peer.transport is None or peer.closed:
            return False
        if peer.eof:
            peer.transport.close()
            return False
        if peer.transport.can_write_eof():
            peer.transport.write_eof()
        return True

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.eof:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.eof:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.on_close is not None:
            self.on_close(self)
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.closed:
            if exc is None:
                peer.transport.close()
            else:
                peer.reset()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def reset(self) -> None:
        """Close with an RST: the other end sees its connection refused or reset at once."""
        self.closed = True
        t = self.transport
        if t is None:
            return
        sock = t.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        t.abort()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def link(a: Pipe, b: Pipe) -> None:
    """Relay between two open pipes from now on (bytes either one held go first)."""
    a.peer, b.peer = b, a
    for side in (a, b):
        if side.held and side.peer is not None:
            side.peer.write(side.held)
            side.held = b""
        if side.transport is not None and not side.closed:
            side.transport.resume_reading()
        if side.eof:
            side.eof_received()


async def open_pipe(source_ip: str | None, host: str, port: int, pipe: Pipe) -> Pipe:
    """Connect `pipe` to host:port from `source_ip` (`relay.connected_socket`: never from another address)."""
    sock = await connected_socket(source_ip, host, port)
    try:
        await asyncio.get_running_loop().create_connection(lambda: pipe, sock=sock)
    except BaseException:
        sock.close()
        raise
    return pipe
