"""The HTTP/1.1 exchange under API requests (kube/http1.py), against servers that misbehave on cue:
keep-alive, framing, connections the server closes, timeouts, limits, TLS failures."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest

from isthmus.kube import http1

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _Server:
    """A TCP server on 127.0.0.1 that runs `handler` for each connection and counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.server: asyncio.Server | None = None

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            writer.close()

    async def __aenter__(self) -> _Server:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def _answering(body: bytes, delay: float = 0.0) -> Handler:
    """A handler that answers every request on its connection with `body`, after `delay` seconds."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _read_request(reader)
            await asyncio.sleep(delay)
            writer.write(_ok(body))
            await writer.drain()

    return handler


def _get(path: str = "/", method: str = "GET", body: bytes = b"") -> bytes:
    length = b"content-length: %d\r\n" % len(body) if body else b""
    return f"{method} {path} HTTP/1.1\r\nhost: test\r\n".encode() + length + b"\r\n" + body


async def _request(pool: http1.Pool, data: bytes, method: str = "GET", read: float | None = 5) -> http1.Response:
    return await pool.request(method, data, connect_timeout=5, read_timeout=read)


async def test_keep_alive_reuses_one_connection_and_reads_every_framing() -> None:
    answers = [
        _ok(b'{"a":1}', b"X-Kind: length\r\n"),
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(b"after continue"),
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while answers:
            await _read_request(reader)
            writer.write(answers.pop(0))
            await writer.drain()

    async with _Server(handler) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        first = await _request(pool, _get())
        assert (first.status, first.reason, first.body) == (200, b"OK", b'{"a":1}')
        assert (b"X-Kind", b"length") in first.headers
        second = await _request(pool, _get(method="POST", body=b"{}"), "POST")
        assert (second.status, second.body) == (201, b"abcdefg")
        assert (await _request(pool, _get())).body == b"after continue"
        assert (await _request(pool, _get(method="DELETE"), "DELETE")).status == 204
        assert server.connections == 1
        pool.close()


async def test_an_answer_that_ends_with_the_connection_is_whole_and_the_connection_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        await writer.drain()

    async with _Server(handler) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        assert (await _request(pool, _get())).body == b"until the end"
        assert (await _request(pool, _get())).body == b"until the end"
        assert server.connections == 2
        pool.close()


async def test_a_connection_the_server_closed_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_ok(b"x"))
        await writer.drain()  # then close: an idle timeout on the server's side

    async with _Server(handler) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        for method in ("GET", "POST", "PATCH"):
            assert (await _request(pool, _get(method=method, body=b"{}"), method)).body == b"x"
            await asyncio.sleep(0.05)  # the close arrives while the connection is idle
        assert server.connections == 3
        pool.close()


async def test_a_connection_idle_too_long_is_replaced_not_reused() -> None:
    """A middlebox may forget an idle connection without a word to either end: one idle longer than
    the pool's idle time is closed and a new one opened; one idle less is reused."""
    async with _Server(_answering(b"x")) as server:
        pool = http1.Pool("127.0.0.1", server.port, None, idle_seconds=0.3)
        await _request(pool, _get())
        await asyncio.sleep(0.1)
        await _request(pool, _get())
        assert server.connections == 1
        await asyncio.sleep(0.5)
        await _request(pool, _get())
        assert server.connections == 2
        await asyncio.sleep(0.05)
        assert server.open == 1  # the idle one was closed, not left behind
        pool.close()


async def test_idempotent_requests_are_sent_again_when_a_reused_connection_drops_them() -> None:
    """The server takes the request on a kept-alive connection and closes it unanswered (it was
    closing as the request came): GET and PUT go again on a new connection, POST and PATCH fail."""
    served = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await _read_request(reader)
        served += 1
        writer.write(_ok(b"first"))
        await writer.drain()
        await _read_request(reader)  # the second request on this connection: dropped unanswered

    async with _Server(handler) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        for method, retried in (("GET", True), ("PUT", True), ("POST", False), ("PATCH", False)):
            pool.close()
            assert (await _request(pool, _get())).body == b"first"
            before = server.connections
            if retried:
                assert (await _request(pool, _get(method=method, body=b"{}"), method)).body == b"first"
                assert server.connections == before + 1
            else:
                with pytest.raises(http1.Disconnected, match="Server disconnected"):
                    await _request(pool, _get(method=method, body=b"{}"), method)
                assert server.connections == before
        pool.close()


async def test_the_read_timeout_counts_between_reads() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await _read_request(reader)
            if b"/silent" in head:
                await asyncio.sleep(5)
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
            for piece in (b"ab", b"cd", b"ef"):  # 0.45 s in all, never 0.3 s without a byte
                await asyncio.sleep(0.15)
                writer.write(piece)
                await writer.drain()

    async with _Server(handler) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        assert (await _request(pool, _get("/dribble"), read=0.3)).body == b"abcdef"
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(http1.ReadTimeout):
            await _request(pool, _get("/silent"), read=0.3)
        assert 0.25 < loop.time() - start < 2
        assert server.connections == 1
        pool.close()


async def test_a_cancelled_request_leaves_no_half_read_connection_behind() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await _read_request(reader)
            if b"/slow" in head:
                await asyncio.sleep(0.3)
            writer.write(_ok(b"slow" if b"/slow" in head else b"fast"))
            await writer.drain()

    async with _Server(handler) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_request(pool, _get("/slow")), 0.1)
        # A connection that still owes the slow answer would hand it to this request.
        assert (await _request(pool, _get("/fast"))).body == b"fast"
        assert server.connections == 2
        pool.close()


async def test_at_most_limit_connections_at_once() -> None:
    async with _Server(_answering(b"ok", delay=0.05)) as server:
        pool = http1.Pool("127.0.0.1", server.port, None, limit=2)
        answers = await asyncio.gather(*(_request(pool, _get()) for _ in range(8)))
        assert [a.body for a in answers] == [b"ok"] * 8
        assert (server.connections, server.most_open) == (2, 2)
        pool.close()


async def test_a_request_waiting_on_a_slow_dial_takes_a_connection_released_meanwhile() -> None:
    """Go's net/http way: a request whose own handshake is slow (a busy client or server) is served
    by the first connection another request releases; its dial, when it comes, joins the pool, and
    a dial that fails fails only a request nothing else served."""
    async with _Server(_answering(b"ok")) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        real_connect = pool._connect
        plan: list[str] = []

        async def connect(connect_timeout: float | None) -> http1._Connection:
            how = plan.pop(0) if plan else "fast"
            if how == "fail":
                await asyncio.sleep(0.2)
                raise http1.ConnectTimeout("")
            if how == "slow":
                await asyncio.sleep(1.0)
            return await real_connect(connect_timeout)

        pool._connect = connect  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        plan[:] = ["fast", "slow"]
        start = loop.time()
        first, second = await asyncio.gather(_request(pool, _get()), _request(pool, _get()))
        assert (first.body, second.body) == (b"ok", b"ok")
        assert loop.time() - start < 0.8  # the second did not wait for its own dial
        await asyncio.sleep(1.2)
        assert server.connections == 2  # the slow dial arrived and joined the pool

        pool.close()
        plan[:] = ["fail"]
        with pytest.raises(http1.ConnectTimeout):  # nothing else to serve it: its dial's failure is its own
            await _request(pool, _get())

        plan[:] = ["fast", "fail"]  # the failing dial's request is served by the first one's connection
        answers = await asyncio.gather(_request(pool, _get()), _request(pool, _get()))
        assert [a.body for a in answers] == [b"ok", b"ok"]
        await asyncio.sleep(0.3)
        pool.close()


async def test_a_burst_waits_for_connections_instead_of_dialing_one_each() -> None:
    """When a handshake takes longer than an answer, a burst is served by the few connections
    MAX_DIALS opens at a time: not one connection (and handshake) per request, left idle after."""
    async with _Server(_answering(b"ok")) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        real_connect = pool._connect

        async def slow_connect(connect_timeout: float | None) -> http1._Connection:
            await asyncio.sleep(0.05)
            return await real_connect(connect_timeout)

        pool._connect = slow_connect  # type: ignore[method-assign]
        answers = await asyncio.gather(*(_request(pool, _get()) for _ in range(40)))
        assert [a.body for a in answers] == [b"ok"] * 40
        await asyncio.sleep(0.2)  # any dial still under way has joined the pool
        assert server.connections <= 2 * http1.MAX_DIALS
        pool.close()


async def test_without_any_connection_a_failed_dial_fails_every_waiting_request() -> None:
    """Dials are limited, failures are not queued: with nothing open to free a connection, every
    request waiting fails with the first dial's error instead of waiting for a dial of its own."""
    pool = http1.Pool("127.0.0.1", 9, None)  # discard's port on loopback: nothing listens

    async def failing(connect_timeout: float | None) -> http1._Connection:
        await asyncio.sleep(0.2)
        raise http1.ConnectTimeout("")

    pool._connect = failing  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    start = loop.time()
    results = await asyncio.gather(*(_request(pool, _get()) for _ in range(20)), return_exceptions=True)
    assert all(isinstance(r, http1.ConnectTimeout) for r in results)
    assert loop.time() - start < 0.5  # one round of dials, not 20 / MAX_DIALS of them
    pool.close()


async def test_connect_failures_and_garbage() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
        await writer.drain()

    async with _Server(garbage) as server:
        pool = http1.Pool("127.0.0.1", server.port, None)
        with pytest.raises(http1.ProtocolError, match="invalid HTTP answer"):
            await _request(pool, _get())
        # TLS to a server that does not speak it, with a CA that signed nothing it has.
        tls = http1.Pool("127.0.0.1", server.port, ssl.create_default_context())
        with pytest.raises(http1.HTTPError):
            await _request(tls, _get())
        pool.close()
        tls.close()
        port = server.port
    refused = http1.Pool("127.0.0.1", port, None)
    with pytest.raises(http1.ConnectError, match=r"\[Errno 111\] Connection refused"):
        await _request(refused, _get())


def test_request_heads_refuse_what_would_split_a_header() -> None:
    """An Authorization value with a line break would smuggle a header of its own into the request:
    such a request takes httpx's way, which refuses it (as any value outside latin-1). The client's
    own headers are checked once, when they change (test_kube_transport.py)."""
    from isthmus.kube.transport import _head

    ok = _head("PATCH", "/api/v1/x?y=1", "127.0.0.1:6443", "accept: application/json\r\n", "Bearer t", b"{}")
    assert ok == (b"PATCH /api/v1/x?y=1 HTTP/1.1\r\nhost: 127.0.0.1:6443\r\naccept: application/json\r\n"
                  b"authorization: Bearer t\r\ncontent-length: 2\r\n\r\n")
    for bad in ("Bearer t\r\nx-evil: 1", "Bearer t\0", "Bearer \u20ac"):
        assert _head("GET", "/", "h", "", bad, None) is None
