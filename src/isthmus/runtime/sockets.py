"""Socket helpers every data plane shares (the VIP proxy, the egress forwarder and gateway)."""

from __future__ import annotations

import asyncio
import os
import socket

__all__ = ["connect"]


async def connect(
    loop: asyncio.AbstractEventLoop,
    sock: socket.socket,
    addr: tuple[str, int],
    timeout: float,  # noqa: ASYNC109
) -> None:
    """`loop.sock_connect` for a numeric address, without its name resolution: uvloop's resolves
    even a literal IP through getaddrinfo on its thread pool (it cost 60 µs CPU per connection).

    A loopback handshake completes inside connect() even though it says EINPROGRESS, so one
    getpeername tells "connected" without registering for writability, arming the timeout and
    waiting a loop turn. TimeoutError after `timeout` seconds."""
    try:
        sock.connect(addr)
        return
    except BlockingIOError:
        pass
    try:
        sock.getpeername()
        return
    except OSError:
        pass  # not connected yet, or refused: SO_ERROR tells
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))
    fd = sock.fileno()
    done = loop.create_future()
    loop.add_writer(fd, _set_done, done)
    try:
        async with asyncio.timeout(timeout):
            await done
    finally:
        loop.remove_writer(fd)
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
