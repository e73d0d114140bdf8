"""HTTP/1.1 keep-alive exchanges for API requests other than watches.

Through aiohttp's client, a server-side apply cost its caller 280-320 µs of CPU, most of it
aiohttp's own objects (request, response, payload writer task, timers, trace hooks) rather than
TLS and syscalls; through this module, 108-117 µs (2026-11-28, the same run). An API request
needs none of that: one request at a time per connection, a body that is already bytes, an answer
read whole. This module is that exchange: the event loop's own TCP and TLS, httptools (llhttp, the
parser of Node.js and of aiohttp's C parser) for the answer, and a pool of keep-alive connections
per server.

What it keeps of aiohttp's behaviour: at most `limit` connections per pool; a read timeout counted
between reads; a connection the server closed, or idle for 15 s, is never reused; an idempotent
request (GET, PUT, DELETE…) that fails on a reused connection before any answer came is sent once
more on a new one, as aiohttp and Go's net/http do (the server may have closed it as we wrote). And
one of Go's: a request dialling a new connection takes an older one released meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import os
import ssl

import httptools

__all__ = ["ConnectError", "ConnectTimeout", "Disconnected", "HTTPError", "Pool", "ProtocolError",
           "ReadError", "ReadTimeout", "Response"]

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
IDLE_SECONDS = 15.0
"""A connection idle longer than this is closed rather than reused (aiohttp's keep-alive timeout):
a load balancer or NAT on the way may have forgotten it without telling either end, and a request
sent on it would wait for its read timeout."""
MAX_DIALS = 4
"""Dials in flight per server: a burst of requests waits for the connections these and the open
ones free, instead of each request opening (and handshaking) one that outlives the burst idle."""


class HTTPError(Exception):
    """The exchange failed; the subclasses say where (kube/transport.py maps them to httpx's)."""


class ConnectError(HTTPError):
    pass


class ConnectTimeout(HTTPError):
    pass


class ReadTimeout(HTTPError):
    pass


class ReadError(HTTPError):
    pass


class Disconnected(ReadError):
    """The server closed the connection before its answer was complete."""


class ProtocolError(ReadError):
    """The answer is not HTTP/1.1."""


class Response:
    __slots__ = ("body", "headers", "reason", "status")

    def __init__(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status, self.reason, self.headers, self.body = status, reason, headers, body


class _Connection(asyncio.Protocol):
    """One connection, one exchange at a time; httptools calls the on_* methods while it parses."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.answered = False  # a byte of an answer came during the current exchange
        self.keep_alive = True
        self.idle_since = 0.0
        self._waiter: asyncio.Future[Response] | None = None
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._framed = True  # the answer says where it ends (Content-Length, chunked, no body)
        self._headers_done = False
        self._timeout = 0.0
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.answered = True
        if self._timer is not None:
            self._last = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(ProtocolError(f"invalid HTTP answer: {e}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # close; connection_lost settles a pending exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None or self._waiter.done():
            return
        if self._headers_done and not self._framed:  # the body ran until the server closed
            self.keep_alive = False
            self._complete()
        elif exc is not None:
            self._fail(ReadError(str(exc) or type(exc).__name__))
        else:
            self._fail(Disconnected("Server disconnected"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._reason, self._headers, self._body = b"", [], []
        self._headers_done, self._framed = False, True

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._headers_done = True
        code = self._parser.get_status_code()
        if code >= 200 and code not in (204, 304):
            self._framed = any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in self._headers)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() < 200:  # 100 Continue and the like: the answer follows
            return
        self.keep_alive = self._parser.should_keep_alive()
        self._complete()

    # the exchange
    def _complete(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            self._waiter.set_result(Response(self._parser.get_status_code(), self._reason, self._headers, body))

    def _fail(self, error: HTTPError) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def _check_timeout(self) -> None:
        left = self._last + self._timeout - self._loop.time()
        if left > 0:
            self._timer = self._loop.call_later(left, self._check_timeout)
        else:
            self._timer = None
            self._fail(ReadTimeout(""))

    async def exchange(self, data: bytes, read_timeout: float | None) -> Response:
        assert self.transport is not None
        waiter: asyncio.Future[Response] = self._loop.create_future()
        self._waiter = waiter
        self.answered = False
        self.transport.write(data)
        if read_timeout is not None:
            self._timeout, self._last = read_timeout, self._loop.time()
            self._timer = self._loop.call_later(read_timeout, self._check_timeout)
        try:
            return await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            try:
                self.transport.close()
            except RuntimeError:  # its event loop is closed: nothing is left open on it
                pass


class Pool:
    """Keep-alive connections to one server (`host`, `port`; TLS with `ssl_context` when given)."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None, *, limit: int = 64,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        self._host, self._port, self._ssl = host, port, ssl_context
        self._idle_seconds = idle_seconds
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(limit)
        self._open: set[_Connection] = set()
        self._waiters: collections.deque[asyncio.Future[tuple[_Connection, bool]]] = collections.deque()
        self._dials: set[asyncio.Task[None]] = set()
        self._dialed: set[asyncio.Future[tuple[_Connection, bool]]] = set()  # waiters with a dial of their own
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        """The loop the pool serves (a pool serves one; kube/transport.py makes one per loop). Kept:
        `asyncio.get_running_loop` makes a getpid() system call on every call."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    async def _connect(self, connect_timeout: float | None) -> _Connection:
        loop = self._running()
        connect = loop.create_connection(lambda: _Connection(loop), self._host, self._port, ssl=self._ssl,
                                         server_hostname=self._host if self._ssl is not None else None)
        try:
            _, conn = await asyncio.wait_for(connect, connect_timeout)
        except TimeoutError:
            raise ConnectTimeout("") from None
        except ssl.SSLError as e:
            raise ConnectError(str(e)) from e
        except OSError as e:  # "[Errno 111] Connection refused", as httpx words it
            raise ConnectError(f"[Errno {e.errno}] {os.strerror(e.errno)}" if e.errno else str(e)) from e
        self._open.add(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    def _take_idle(self) -> _Connection | None:
        now = self._running().time()
        while self._idle:
            conn = self._idle.pop()
            if (conn.closed or conn.transport is None or conn.transport.is_closing()
                    or now - conn.idle_since > self._idle_seconds):
                self._drop(conn)
                continue
            return conn
        return None

    def _release(self, conn: _Connection, *, fresh: bool) -> None:
        """Hand a usable connection to the request that has waited longest for one, else keep it idle."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result((conn, not fresh))
                return
        conn.idle_since = self._running().time()
        self._idle.append(conn)

    async def _dial_for(self, waiter: asyncio.Future[tuple[_Connection, bool]], connect_timeout: float | None) -> None:
        try:
            conn = await self._connect(connect_timeout)
        except HTTPError as e:
            self._dialed.discard(waiter)
            self._dials.discard(asyncio.current_task())
            # Its request fails, as would every waiting one when no connection is open to free.
            for other in [waiter] if self._open else [waiter, *self._waiters]:
                if not other.done():
                    other.set_exception(e)
            self._dial_next(connect_timeout)
            return
        except BaseException:
            self._dialed.discard(waiter)
            raise
        self._dialed.discard(waiter)
        self._dials.discard(asyncio.current_task())
        self._release(conn, fresh=True)
        self._dial_next(connect_timeout)

    def _dial_next(self, connect_timeout: float | None) -> None:
        """Start dials for the longest-waiting requests without one, up to MAX_DIALS in flight:
        every waiting request gets a connection someone frees, or a dial of its own."""
        if len(self._dials) >= MAX_DIALS:
            return
        loop = self._running()
        for waiter in self._waiters:
            if len(self._dials) >= MAX_DIALS:
                return
            if waiter.done() or waiter in self._dialed:
                continue
            self._dialed.add(waiter)
            dial = loop.create_task(self._dial_for(waiter, connect_timeout))
            self._dials.add(dial)
            dial.add_done_callback(self._dials.discard)

    async def _acquire(self, connect_timeout: float | None) -> tuple[_Connection, bool]:
        """(a connection, whether it served a request before). Without an idle one, the request
        waits for whichever comes first: a connection another request releases, or a dial
        (Go's net/http does the same); a dial that comes second joins the pool. At most
        MAX_DIALS dials run at once; a request without one gets one as earlier ones finish.
        Under a burst that keeps a slow handshake from failing a request an open connection serves,
        and the burst from opening a connection per request."""
        conn = self._take_idle()
        if conn is not None:
            return conn, True
        loop = self._running()
        waiters = self._waiters
        while waiters and waiters[0].done():  # failed or cancelled: nothing will pop them otherwise
            waiters.popleft()
        waiter: asyncio.Future[tuple[_Connection, bool]] = loop.create_future()
        waiters.append(waiter)
        self._dial_next(connect_timeout)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._release(waiter.result()[0], fresh=False)  # handed over as we were cancelled
            else:
                waiter.cancel()
            raise

    async def request(self, method: str, data: bytes, *, connect_timeout: float | None,
                      read_timeout: float | None) -> Response:
        """Send `data` (the request head and body, already encoded) and read the whole answer."""
        retry = method in IDEMPOTENT
        async with self._slots:
            while True:
                conn, reused = await self._acquire(connect_timeout)
                try:
                    response = await conn.exchange(data, read_timeout)
                except ReadError:
                    self._drop(conn)
                    if reused and retry and not conn.answered:
                        retry = False
                        continue
                    raise
                except BaseException:  # a timeout or a cancelled caller: the connection's state is unknown
                    self._drop(conn)
                    raise
                if conn.keep_alive and not conn.closed:
                    self._release(conn, fresh=False)
                else:
                    self._drop(conn)
                return response

    def close(self) -> None:
        for dial in list(self._dials):
            dial.cancel()
        for conn in list(self._open):
            self._drop(conn)
        self._idle.clear()


def ssl_context_for(setting: ssl.SSLContext | bool) -> ssl.SSLContext:
    """aiohttp's `ssl=` setting as a context: True verifies with the system's CAs, False does not verify."""
    if isinstance(setting, ssl.SSLContext):
        return setting
    ctx = ssl.create_default_context()
    if not setting:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
