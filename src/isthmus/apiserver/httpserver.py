"""The apiserver's HTTP/1.1 connections: plain requests on a lean protocol, the rest on aiohttp's.

aiohttp's server costs about 115 µs of CPU per request (its request, payload stream, writer and
response machinery) where the exchange itself needs about half: a tenth of a create's CPU and more
of a status patch's. Nearly every request the components make is a plain one: a head, a body of
known length, one answer. Those are checked by llhttp (through httptools, the parser aiohttp
uses) and read here in one pass, handed to the same handler as a `LeanRequest` by the
connection's one task, and answered with one write.

In a running server each Python call costs a request about 0.7 µs of CPU (its code and data are
rarely still in the caches when the next request comes): the path counts its calls. A create
makes 79 (cProfile's count), down from 150.

Whatever is not plain goes to aiohttp before a byte of it is consumed: watches and the pods'
streaming subresources (log, exec, attach, port-forward), connection upgrades, `Expect`,
chunked bodies, bodies over the size limit, HTTP/1.0 and unusual request targets. The connection
then stays with aiohttp (`transport.set_protocol`) with the bytes received so far, so every such
request is served exactly as before; clients keep watches on connections of their own anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, cast

import httptools
from aiohttp import HttpVersion11, web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy, MultiMapping
from yarl import URL

log = logging.getLogger("isthmus.apiserver")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_HEAD_BYTES = 1 << 20  # Go's http.DefaultMaxHeaderBytes, which kube-apiserver keeps
IDLE_SECONDS = 75.0  # aiohttp's keep-alive timeout: an idle connection is closed after it
HIGH_WATER = 4 << 20  # request bytes buffered while an answer is pending, past which reading pauses
# The pods' subresources a node serves: streamed, sometimes upgraded (handlers/pods.py).
_NODE_SUBRESOURCES = (b"/log", b"/exec", b"/attach", b"/portforward", b"/proxy")
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_NO_QUERY: MultiMapping[str] = MultiDictProxy(MultiDict())
_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
_QUERIES: dict[str, MultiMapping[str]] = {}
"""Decoded query strings, by their raw text: a client sends the same few over and over
(`fieldManager=...&force=true`), and yarl's decoding cost more than the rest of reading a request.
The values are read-only proxies, so requests can share them."""
_QUERIES_MAX = 512
# Content-Type values already parsed (aiohttp parses each with the email package): a few kinds
# of clients send a few values. Bounded: values past it are parsed every time.
_CONTENT_TYPES: dict[str, tuple[str, dict[str, str]]] = {}
_NO_CONTENT_TYPE: tuple[str, dict[str, str]] = ("application/octet-stream", {})


def _plain(head: bytes, line_end: int) -> bool:
    """Whether the request whose head this is can be served here (see the module docstring).
    A false "no" only costs speed: aiohttp serves it."""
    line = head[:line_end]
    if not line.endswith(b" HTTP/1.1"):
        return False
    sp = line.find(b" ")
    target = line[sp + 1:-9]
    if not target.startswith(b"/") or b"watch" in target:
        return False
    if b"/pods/" in target:
        path = target.partition(b"?")[0]
        if path.endswith(_NODE_SUBRESOURCES):
            return False
    low = head.lower()
    return b"\nupgrade:" not in low and b"\nexpect:" not in low and b"\ntransfer-encoding:" not in low


class LeanRequest(web.Request):
    """A plain request as handlers see it: the parts of aiohttp's Request they use, without its
    stream and writer. aiohttp's own __init__ is skipped on purpose; `writer` is not available.

    What handlers read several times per request are plain attributes, not properties as in
    aiohttp: a property is a Python call each time (about 0.7 µs of server CPU in a running
    server). A class attribute that is not a descriptor shadows aiohttp's property, and the
    instance's own value then comes first."""

    ATTRS = web.Request.ATTRS | frozenset(["_target", "_body", "_url", "method", "headers", "transport",
                                           "raw_path", "path", "content_length", "content_type"])
    method: str = ""
    headers: CIMultiDictProxy[str] = _NO_HEADERS
    transport: asyncio.Transport | None = None
    raw_path: str = ""
    path: str = ""
    content_length: int | None = None
    content_type: str = ""

    def __init__(self, method: str, target: str, headers: CIMultiDictProxy[str], body: bytes,
                 transport: asyncio.Transport) -> None:
        self.method = method
        self._target = self.raw_path = target
        self.headers = self._headers = headers  # aiohttp's content-type parsing reads _headers
        self._body = body
        self.transport = transport
        self._state = {}
        self._cache = {}  # aiohttp's reified properties keep their values here
        self._url: URL | None = None
        path = target.partition("?")[0]
        self.path = path if "%" not in path else self._rel().path  # only escapes need decoding
        length = headers.get("Content-Length")
        self.content_length = None if length is None else int(length)
        raw = headers.get("Content-Type")
        hit = _CONTENT_TYPES.get(raw) if raw is not None else _NO_CONTENT_TYPE
        if hit is None:
            self._parse_content_type(raw)
            self.content_type = self._content_type or ""
        else:  # as aiohttp's _parse_content_type leaves it (RFC 2616's default when there is none)
            self._stored_content_type = raw
            self.content_type, params = hit
            self._content_dict = dict(params) if params else {}  # aiohttp's is the request's own, and mutable

    def _rel(self) -> URL:
        if self._url is None:
            path, _, query = self._target.partition("?")
            self._url = URL.build(path=path, query_string=query, encoded=True)
        return self._url

    @property
    def version(self) -> Any:
        return HttpVersion11

    @property
    def rel_url(self) -> URL:
        return self._rel()

    @property
    def query(self) -> MultiMapping[str]:
        raw = self._target.partition("?")[2]
        if not raw:  # no query, or an empty one: nothing to decode
            return _NO_QUERY
        query = _QUERIES.get(raw)
        if query is None:
            if len(_QUERIES) >= _QUERIES_MAX:
                _QUERIES.clear()
            query = _QUERIES[raw] = self._rel().query
        return query

    @property
    def query_string(self) -> str:
        return self._rel().query_string

    @property
    def keep_alive(self) -> bool:
        return True

    @property
    def remote(self) -> str | None:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, (list, tuple)) and peer else None

    @property
    def can_read_body(self) -> bool:
        return bool(self._body)

    @property
    def body_exists(self) -> bool:
        return bool(self._body)

    async def read(self) -> bytes:
        return self._body

    def _parse_content_type(self, raw: str | None) -> None:
        super()._parse_content_type(raw)
        if raw is not None and len(_CONTENT_TYPES) < 64:
            _CONTENT_TYPES[raw] = (self._content_type or "", dict(self._content_dict or {}))

    async def text(self) -> str:
        return self._body.decode(self.charset or "utf-8")


class JsonAnswer(web.Response):
    """A JSON answer to a plain request, which _encode writes straight from its body: aiohttp's own
    __init__ (headers multidict, content-type parsing) is skipped on purpose, as LeanRequest skips
    its own; aiohttp never sees one (handlers make them for LeanRequests only). The bytes are the
    same as for a web.Response(body, status, content_type="application/json") with these warnings."""

    keep_alive: bool | None = None  # a plain attribute where aiohttp has a property, as in LeanRequest
    extra_head: bytes = b""  # more header lines, each ending in CRLF (API Priority and Fairness's)

    def __init__(self, body: bytes, status: int = 200, warnings: list[str] | None = None) -> None:
        self._body = self._json = body
        self._status = status
        self._reason = _REASONS.get(status, "")
        self._warnings = tuple(warnings or ())
        self._keep_alive = None
        self._compression = False
        self._chunked = False

    @property
    def headers(self) -> CIMultiDict[str]:
        """As aiohttp would hold them (only for whoever asks: _encode does not)."""
        headers = CIMultiDict({"Content-Type": "application/json"})
        for w in self._warnings:
            headers.add("Warning", f'299 - "{w}"')
        for line in self.extra_head.decode().splitlines():
            name, _, value = line.partition(": ")
            headers.add(name, value)
        return headers

    def encode(self, head_only: bool, keep_alive: bool) -> bytes:
        status, body = self._status, self._json
        no_body = status < 200 or status in (204, 304)
        start = _JSON_STARTS.get(status)
        if start is None:
            start = _JSON_STARTS[status] = (f"HTTP/1.1 {status} {self._reason}\r\n"
                                            "Content-Type: application/json\r\n").encode()
        parts = [start]
        for w in self._warnings:
            value = _one_line(f'299 - "{w}"')
            parts.append(f"Warning: {value}\r\n".encode("utf-8", "surrogateescape"))
        if self.extra_head:
            parts.append(self.extra_head)
        if not no_body:
            parts.append(b"Content-Length: %d\r\n" % len(body))
        parts.append(_date_and_server())
        if not keep_alive:
            parts.append(b"Connection: close\r\n")
        parts.append(b"\r\n")
        if not (no_body or head_only):
            parts.append(body)
        return b"".join(parts)


_JSON_STARTS: dict[int, bytes] = {}
_Next = tuple["LeanRequest", bool]  # a request parsed whole, and whether its connection stays open
_date_line: tuple[int, bytes] = (0, b"")


def _date_and_server() -> bytes:
    """The Date and Server lines, made once a second (aiohttp formats its date once a second too)."""
    global _date_line
    now = int(time.time())
    if _date_line[0] != now:
        _date_line = (now, f"Date: {rfc822_formatted_time()}\r\nServer: {SERVER_SOFTWARE}\r\n".encode())
    return _date_line[1]


class _NoCallbacks:
    """What llhttp reports to while it checks a plain request's syntax: nothing (httptools calls
    only the callbacks its protocol object has)."""


class LeanProtocol(asyncio.Protocol):
    """One connection: requests one at a time, in order, until it is handed to aiohttp."""

    def __init__(self, server: LeanServer) -> None:
        self._server = server
        # Made by the loop as it accepts. Kept: asyncio.get_running_loop() costs a getpid() system
        # call each time (its check for a forked child), one per request otherwise.
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._parser: Any = None
        self._head_len = -1  # the current request's head, once parsed: its length in _buf
        self._need = 0  # ...and its body's
        self._method = ""  # the current request's, once its head is parsed
        self._target = ""
        self._headers: list[tuple[str, str]] = []
        self._keep_alive = True
        self._busy = False  # a request is being answered
        self._closing = False
        self._writable: asyncio.Future[None] | None = None
        self._worker: asyncio.Task[None] | None = None  # answers this connection's requests in turn
        self._next: asyncio.Future[_Next | None] | None = None  # what the idle worker waits on
        self._paused = False
        self.last_active = time.monotonic()

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is not a subclass
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._closing = True
        self._transport = None
        self._end_worker()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self.last_active = time.monotonic()
        if not self._busy:
            nxt = self._advance()
            if nxt is not None:
                self._dispatch(nxt)
        elif len(self._buf) > HIGH_WATER and self._transport is not None:
            self._transport.pause_reading()  # pipelined requests pile up faster than they are answered
            self._paused = True

    def eof_received(self) -> bool | None:
        return None  # close: a half-closed client has nothing more to ask

    # --- requests

    def _advance(self) -> _Next | None:
        """The next request _buf holds whole, to be answered; None when it holds none yet, or the
        connection was handed over or failed."""
        transport = self._transport
        if transport is None or self._closing:
            return None
        buf = self._buf
        if self._head_len < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    self._fail(431, "Request Header Fields Too Large")
                return None
            head = bytes(buf[:end + 4])
            line_end = head.find(b"\r\n")
            if line_end <= 0 or not _plain(head, line_end):
                self._hand_over()
                return None
            if self._parser is None:
                self._parser = httptools.HttpRequestParser(_NoCallbacks())
            try:
                self._parser.feed_data(head)
            except httptools.HttpParserError as e:
                self._fail(400, f"Bad Request: {e}")
                return None
            length = self._split_head(head, line_end)
            if length > self._server.max_body_bytes:
                self._hand_over()  # aiohttp answers 413 as before
                return None
            self._head_len, self._need = end + 4, length
        total = self._head_len + self._need
        if len(buf) < total:
            return None
        body = bytes(buf[self._head_len:total])
        if body:
            try:
                self._parser.feed_data(body)
            except httptools.HttpParserError as e:
                self._fail(400, f"Bad Request: {e}")
                return None
        del buf[:total]
        self._head_len = -1
        keep_alive = self._keep_alive
        request = LeanRequest(self._method, self._target, CIMultiDictProxy(CIMultiDict(self._headers)), body,
                              transport)
        self._busy = True
        return request, keep_alive

    def _split_head(self, head: bytes, line_end: int) -> int:
        """The request line and headers of a head llhttp accepted, as llhttp reports them (a value
        without its leading blanks, its trailing ones kept; no folded lines: llhttp refuses them),
        read here in one pass rather than through a Python callback per header. The body's length."""
        line = head[:line_end - 9].decode("utf-8", "surrogateescape")  # _plain: it ends " HTTP/1.1"
        self._method, _, self._target = line.partition(" ")
        headers: list[tuple[str, str]] = []
        length, keep_alive = 0, True
        fields = head[line_end + 2:-4]
        for line in fields.decode("utf-8", "surrogateescape").split("\r\n") if fields else ():
            name, _, value = line.partition(":")
            value = value.lstrip(" \t")
            headers.append((name, value))
            n = len(name)
            if n == 14 and name.lower() == "content-length":
                length = int(value)  # llhttp accepted it: digits, and one value
            elif n == 10 and name.lower() == "connection" and "close" in value.lower():
                keep_alive = keep_alive and not any(t.strip() == "close" for t in value.lower().split(","))
        self._headers, self._keep_alive = headers, keep_alive
        return length

    def _dispatch(self, nxt: _Next) -> None:
        """A request to the connection's worker: the idle one, or a new one for the first request.
        One task per connection, not per request: a task costs its creation and asyncio's
        registration of it (a WeakSet, in Python) each time; the worker's context is the
        connection's, and _handle resets the one variable a request sets."""
        waiter = self._next
        if waiter is not None:
            self._next = None
            if not waiter.done():
                waiter.set_result(nxt)
        elif self._worker is None:
            self._worker = self._loop.create_task(self._work(nxt))

    def _end_worker(self) -> None:
        """The idle worker told there is no next request (the connection closed or left us)."""
        waiter, self._next = self._next, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _work(self, nxt: _Next) -> None:
        """Answer the connection's requests in turn, waiting for each next one, until it closes."""
        try:
            while True:
                request, keep_alive = nxt
                try:
                    resp = await self._server.handler(request)
                    keep_alive = keep_alive and resp.keep_alive is not False
                    if type(resp) is JsonAnswer:  # most answers
                        out = resp.encode(request.method == "HEAD", keep_alive)
                    else:
                        out = _encode(request, resp, keep_alive)
                except Exception:
                    log.exception("cannot answer %s %s", request.method, request.raw_path)
                    out, keep_alive = _simple(500, "Internal Server Error"), False
                transport = self._transport
                if transport is None:
                    return
                transport.write(out)
                self.last_active = time.monotonic()
                if not keep_alive:
                    self._closing = True
                    transport.close()
                    return
                if self._writable is not None and not self._writable.done():
                    await self._writable  # the client reads slower than we answer
                self._busy = False
                if self._paused and self._transport is not None:
                    self._paused = False
                    self._transport.resume_reading()
                got = self._advance() if self._buf else None
                if got is None:
                    if self._transport is None or self._closing:
                        return
                    self._next = self._loop.create_future()
                    got = await self._next
                    if got is None:
                        return
                nxt = got
        finally:
            self._worker = None

    def _fail(self, status: int, message: str) -> None:
        """A request that cannot be parsed: answered and the connection closed, as aiohttp does."""
        if self._transport is not None:
            self._transport.write(_simple(status, message))
            self._transport.close()
        self._closing = True

    def _hand_over(self) -> None:
        """The rest of this connection to aiohttp, starting with the bytes not yet consumed."""
        transport = self._transport
        assert transport is not None
        self._server.connections.discard(self)
        self._transport = None
        self._end_worker()
        proto = self._server.aiohttp_server()
        transport.set_protocol(proto)
        proto.connection_made(transport)
        pending, self._buf = bytes(self._buf), bytearray()
        if pending:
            proto.data_received(pending)

    def close_if_idle(self, before: float) -> None:
        if not self._busy and self.last_active < before and self._transport is not None:
            self._closing = True
            self._transport.close()

    def close(self) -> None:
        if self._transport is not None:
            self._closing = True
            self._transport.close()


def _simple(status: int, message: str) -> bytes:
    body = message.encode()
    return (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _one_line(value: str) -> str:
    """A header value as Go's server writes it: line breaks become spaces (a warning may quote user input)."""
    if "\r" in value or "\n" in value:
        return value.replace("\r", " ").replace("\n", " ")
    return value


def _encode(request: LeanRequest, resp: web.StreamResponse, keep_alive: bool) -> bytes:
    """The answer (not a JsonAnswer: those encode themselves) as aiohttp would write it, headers
    included, in one buffer."""
    if type(resp) is not web.Response or resp.compression or resp.chunked:
        raise TypeError(f"a plain request got a {type(resp).__name__} answer")
    body = resp.body
    if body is None:
        body = b""
    elif not isinstance(body, (bytes, bytearray)):
        raise TypeError(f"a plain request got a {type(body).__name__} body")
    status = resp.status
    headers = resp.headers
    no_body = status < 200 or status in (204, 304)
    lines = [f"HTTP/1.1 {status} {resp.reason}"]
    for name, value in headers.items():
        if name in ("Content-Length", "Transfer-Encoding", "Connection"):
            continue
        lines.append(f"{name}: {_one_line(value)}")
    if not no_body:
        if body and "Content-Type" not in headers:
            lines.append("Content-Type: application/octet-stream")
        lines.append(f"Content-Length: {len(body)}")
    if "Date" not in headers:
        lines.append(f"Date: {rfc822_formatted_time()}")  # aiohttp's, formatted once a second
    if "Server" not in headers:
        lines.append(f"Server: {SERVER_SOFTWARE}")
    if not keep_alive:
        lines.append("Connection: close")
    lines.append("\r\n")
    head = "\r\n".join(lines).encode("utf-8", "surrogateescape")
    if no_body or request.method == "HEAD":
        return head
    return head + body


class LeanServer:
    """The listening side: a LeanProtocol per connection, aiohttp's server for what it hands over."""

    def __init__(self, handler: Handler, aiohttp_server: web.Server, max_body_bytes: int) -> None:
        self.handler = handler
        self.aiohttp_server = aiohttp_server
        self.max_body_bytes = max_body_bytes
        self.connections: set[LeanProtocol] = set()
        self._listener: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def listen(self, host: str, port: int, ssl: Any = None) -> int:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(lambda: LeanProtocol(self), host, port, ssl=ssl,
                                                  reuse_address=True, backlog=1024)
        self._sweeper = loop.create_task(self._sweep())
        return int(self._listener.sockets[0].getsockname()[1])

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(IDLE_SECONDS / 5)
            before = time.monotonic() - IDLE_SECONDS
            for conn in list(self.connections):
                conn.close_if_idle(before)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._listener is not None:
            self._listener.close()
        for conn in list(self.connections):
            conn.close()
        await self.aiohttp_server.shutdown(1.0)
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._listener.wait_closed(), 1.0)
