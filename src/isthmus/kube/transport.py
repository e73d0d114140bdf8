"""An aiohttp transport under lightkube's httpx client.

lightkube builds requests and decodes responses well, but the transport beneath it (httpcore on
anyio, with anyio's TLS stream) cost the discovery agent about 2 ms of CPU per API request, most
of its time (bench/mcs.py, py-spy). aiohttp does the same HTTP/1.1 keep-alive exchange with a C
parser and asyncio's own TLS: the request still goes through lightkube and httpx (auth, token
refresh, response model), only the bytes move through aiohttp.

Since 2026-11-28 a request that is not a watch skips httpx altogether (`fast_request`): lightkube
still prepares it and decodes the answer, but the bytes go from its prepared request to the wire
and back without httpx's Request, auth flow, redirect and cookie handling and Response stream,
which cost about as much CPU as the HTTP exchange itself; and not through aiohttp's client
either, whose own objects cost more than the exchange, but through `kube/http1.py`'s keep-alive
pool. Auth it cannot apply by itself (exec plugins, basic auth) and clients with event hooks keep
httpx's way, over aiohttp; so do watches, whose bodies stream.

Errors are raised as the httpx exceptions the rest of the code already handles (all are
`httpx2.TransportError`). Sessions are per event loop, made on first use, because a CLI may run
several `asyncio.run`s with one client.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import re
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import aiohttp
import httpx2
import msgspec
from lightkube.config.client_adapter import BearerAuth
from prometheus_client import Counter

from isthmus.kube import http1
from isthmus.runtime.metrics import REGISTRY

__all__ = ["AiohttpTransport", "install"]

REQUESTS = Counter(
    "isthmus_rest_client_requests_total",
    "Requests this process sent to API servers, by method and HTTP status (client-go's "
    "rest_client_requests_total; code is \"<error>\" when no answer came).",
    ["method", "code"], registry=REGISTRY,
)


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise _mapped(e, self._request) from e

    async def aclose(self) -> None:
        self._response.release()


def _mapped(e: BaseException, request: httpx2.Request) -> httpx2.TransportError:
    """The httpx exception a caller of lightkube expects for an aiohttp failure."""
    if isinstance(e, aiohttp.ConnectionTimeoutError):  # timeouts carry no text, as httpx's own
        return httpx2.ConnectTimeout("", request=request)
    if isinstance(e, TimeoutError):
        return httpx2.ReadTimeout("", request=request)
    message = str(e) or type(e).__name__
    if isinstance(e, aiohttp.ClientConnectorError | aiohttp.ClientSSLError):
        os_error = e.os_error
        if os_error.errno and not isinstance(e, aiohttp.ClientSSLError):  # "[Errno 111] Connection refused"
            message = f"[Errno {os_error.errno}] {os.strerror(os_error.errno)}"
        return httpx2.ConnectError(message, request=request)
    if isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx2.RemoteProtocolError(message, request=request)
    return httpx2.ReadError(message, request=request)


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """httpx's transport interface over an aiohttp session (keep-alive pool, TLS from `ssl_context`)."""

    def __init__(self, ssl_context: ssl.SSLContext | bool, *, limit: int = 64) -> None:
        self._ssl: ssl.SSLContext | bool = ssl_context
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pools: dict[tuple[str, int, bool], http1.Pool] = {}
        self._pools_loop: asyncio.AbstractEventLoop | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, ssl=self._ssl, enable_cleanup_closed=False)
            # httpx decodes content itself (it sees Content-Encoding); aiohttp must leave bodies as sent.
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                  skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
                                                  cookie_jar=aiohttp.DummyCookieJar())
            self._loop = loop
        return self._session

    def _pool_for_loop(self, host: str, port: int, tls: bool) -> http1.Pool:
        """The keep-alive pool of `fast_request` for one server (per event loop, as the session)."""
        loop = asyncio.get_running_loop()
        if self._pools_loop is not loop:
            self._close_pools()
            self._pools_loop = loop
        pool = self._pools.get((host, port, tls))
        if pool is None:
            ctx = http1.ssl_context_for(self._ssl) if tls else None
            pool = self._pools[(host, port, tls)] = http1.Pool(host, port, ctx, limit=self._limit)
        return pool

    def _close_pools(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = self._session_for_loop()
        t: dict[str, Any] = request.extensions.get("timeout") or {}
        # httpx's connect and read timeouts as aiohttp's: no bound on the whole exchange (watches).
        timeout = aiohttp.ClientTimeout(total=None, connect=t.get("connect"), sock_connect=t.get("connect"),
                                        sock_read=t.get("read"))
        body = request.content if request.method not in ("GET", "HEAD") else None
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
                   if k.lower() not in (b"host", b"content-length", b"transfer-encoding")]
        try:
            response = await session.request(request.method, str(request.url), headers=headers, data=body,
                                              timeout=timeout, allow_redirects=False, compress=None)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            REQUESTS.labels(request.method, "<error>").inc()
            raise _mapped(e, request) from e
        REQUESTS.labels(request.method, str(response.status)).inc()
        return httpx2.Response(status_code=response.status, headers=list(response.raw_headers),
                               stream=_Body(response, request), request=request,
                               extensions={"http_version": b"HTTP/1.1",
                                           "reason_phrase": (response.reason or "").encode()})

    async def aclose(self) -> None:
        self._close_pools()
        if self._session is not None and not self._session.closed:
            try:
                await self._session.close()
            except RuntimeError:  # its loop is gone: nothing is left open on it
                pass
        self._session = None


class _QuietUnclosed(logging.Filter):
    """A lightkube client nobody closed (a CLI command ending, a test dropping it) was silent with
    httpx; aiohttp reports its session through the loop's exception handler. Nothing leaks past
    the process, so that report is noise on a user's terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Unclosed client session", "Unclosed connector"))


logging.getLogger("asyncio").addFilter(_QuietUnclosed())


# Set (helpers.apply_quiet and the like) when the caller drops a write's answer: the fast path then
# skips decoding it into lightkube's model (client-go callers ignore the returned object the same way).
ANSWER_UNREAD: contextvars.ContextVar[bool] = contextvars.ContextVar("isthmus_answer_unread", default=False)


@contextlib.contextmanager
def answer_unread() -> Iterator[None]:
    """Within it, requests on the fast path return None instead of the decoded answer (2xx only)."""
    token = ANSWER_UNREAD.set(True)
    try:
        yield
    finally:
        ANSWER_UNREAD.reset(token)

_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~/-]*")  # relative, as lightkube makes them ("api/v1/...")
_PLAIN_QUERY = re.compile(r"[A-Za-z0-9._~%+=&-]*")


def fast_build_request(inner: httpx2.AsyncClient) -> Callable[..., httpx2.Request]:
    """`inner.build_request` without parsing the URL three times over.

    httpx parses the relative path, then the path merged with the base URL (host and IP address
    included), then that URL again with the query: about a sixth of the discovery agent's CPU
    (bench/mcs.py, py-spy). lightkube's paths are made of Kubernetes names and its queries are
    urlencoded, so they need no quoting or normalising: such a request gets the base URL's parsed
    form with its path and query put in. Anything else (other characters, dot segments, client-wide
    params or cookies, other arguments) takes httpx's own way; the result is the same Request.
    """
    slow = inner.build_request
    use_default = httpx2.USE_CLIENT_DEFAULT

    def build_request(method: str, url: Any, *, params: Any = None, content: Any = None, headers: Any = None,
                      timeout: Any = use_default, **other: Any) -> httpx2.Request:
        query = str(httpx2.QueryParams(params)) if params else None
        if (other or type(url) is not str or inner.params or inner.cookies or not _PLAIN_PATH.fullmatch(url)
                or "/." in f"/{url}" or (query is not None and not _PLAIN_QUERY.fullmatch(query))):
            return slow(method, url, params=params, content=content, headers=headers, timeout=timeout, **other)
        base = inner.base_url._uri_reference
        target = httpx2.URL.__new__(httpx2.URL)
        target._uri_reference = base._replace(path=(base.path or "/") + url.lstrip("/"), query=query)
        t = inner.timeout if timeout is use_default else httpx2.Timeout(timeout)
        return httpx2.Request(method, target, content=content, headers=inner._merge_headers(headers),
                              extensions={"timeout": t.as_dict()})

    return build_request


def _bearer(auth: Any) -> tuple[bool, str | None]:
    """(whether fast_request can authenticate like `auth`, the Authorization header it sends now)."""
    if auth is None:
        return True, None
    if isinstance(auth, BearerAuth):
        return True, auth._bearer
    header = getattr(auth, "bearer_header", None)  # kube/client.py's TokenFileAuth
    if callable(header):
        return True, header()
    return False, None


class _Ok:
    """What lightkube's handle_response reads of a successful response (it raises for the others)."""

    __slots__ = ("content",)

    def __init__(self, content: bytes) -> None:
        self.content = content

    def raise_for_status(self) -> None:
        pass


_json_encode = msgspec.json.encode  # what lightkube encodes request bodies with

UNSENT: Any = object()
"""What the fast path answers for a request it leaves to lightkube's own way."""


def _query(params: dict[str, Any]) -> str:
    """httpx's query string for lightkube's params."""
    if all(type(v) is str for v in params.values()):
        return _plain_query(tuple(params.items()))
    return str(httpx2.QueryParams(params))


@functools.lru_cache(maxsize=256)
def _plain_query(params: tuple[tuple[str, str], ...]) -> str:
    """Memoized: writes send the same few (fieldManager, force)."""
    return str(httpx2.QueryParams(dict(params)))


_UNSAFE = re.compile(r"[\r\n\0]")


_PER_REQUEST = frozenset({"authorization", "content-type", "content-length", "host", "transfer-encoding"})


def _head(method: str, target: str, netloc: str, fields: str, auth: str | None, body: bytes | None) -> bytes | None:
    """The request line and headers as sent on the wire (`fields`: header lines already checked);
    None for an Authorization header httpx would refuse."""
    if auth is not None:
        if _UNSAFE.search(auth):
            return None
        fields += f"authorization: {auth}\r\n"
    length = f"content-length: {len(body)}\r\n" if body is not None else ""
    try:
        return f"{method} {target} HTTP/1.1\r\nhost: {netloc}\r\n{fields}{length}\r\n".encode("latin-1")
    except UnicodeEncodeError:
        return None


def _mapped_http1(e: http1.HTTPError, request: httpx2.Request) -> httpx2.TransportError:
    """The httpx exception a caller of lightkube expects for a failed exchange (as `_mapped`)."""
    if isinstance(e, http1.ConnectTimeout):
        return httpx2.ConnectTimeout("", request=request)
    if isinstance(e, http1.ReadTimeout):
        return httpx2.ReadTimeout("", request=request)
    if isinstance(e, http1.ConnectError):
        return httpx2.ConnectError(str(e), request=request)
    if isinstance(e, http1.Disconnected | http1.ProtocolError):
        return httpx2.RemoteProtocolError(str(e), request=request)
    return httpx2.ReadError(str(e), request=request)


def fast_request(generic: Any, transport: AiohttpTransport) -> Callable[..., Any]:
    """lightkube's GenericAsyncClient.request without httpx, over `http1.Pool` (one per server and loop).

    The same request goes out (path, query, body, headers, timeout) and the same result or
    exception comes back: an answer other than 2xx is handed to lightkube as an httpx Response, so
    it raises as before (its ApiError for a kube Status); a 401 makes a token-file auth read its file again and retry once,
    as its httpx auth flow does. Watches, servers behind a proxy, auth it cannot apply and clients
    with event hooks (tests record requests that way) take lightkube's own way.
    """
    slow = generic.request
    inner: httpx2.AsyncClient = generic._client
    base_url = inner.base_url
    base = str(base_url).rstrip("/") + "/"
    host, netloc = base_url.host, base_url.netloc.decode("ascii")
    tls = base_url.scheme == "https"
    port = base_url.port or (443 if tls else 80)
    prefix = base_url.raw_path.decode("ascii").rstrip("/") + "/"
    counters: dict[tuple[str, int], Any] = {}
    default_timeout = (inner.timeout.connect, inner.timeout.read)
    # A server httpx would reach through a proxy (HTTPS_PROXY and the like, for a client that trusts
    # the environment): httpx's own proxy transport carries its requests.
    proxied = inner._transport_for_url(base_url) is not transport

    def usable() -> tuple[bool, str | None]:
        """(whether this client's requests may go the fast way now, the Authorization header they send)."""
        can, auth = _bearer(inner.auth)
        if proxied or not can or any(inner.event_hooks.values()) or inner.params or inner.cookies:
            return False, None
        return True, auth

    async def request(method: str, res: Any = None, obj: Any = None, name: Any = None, namespace: Any = None,
                      watch: bool = False, headers: dict[str, Any] | None = None,
                      params: dict[str, Any] | None = None) -> Any:
        ok, auth = usable() if not watch else (False, None)
        if ok:
            br = generic.prepare_request(method, res, obj, name, namespace, watch, headers=headers, params=params)
            answer = await send(method, br, auth)
            if answer is not UNSENT:
                return answer
        return await slow(method, res, obj, name, namespace, watch, headers=headers, params=params)

    async def prepared(method: str, br: Any) -> Any:
        """A request the caller prepared (`br`, lightkube's BasicRequest: path, params, body, headers) sent
        the fast way; UNSENT when this client's requests cannot go that way (the caller then asks lightkube)."""
        ok, auth = usable()
        return await send(method, br, auth) if ok else UNSENT

    block: list[Any] = [None, None]  # inner.headers.raw as last seen, and those headers as sent

    def header_block() -> str | None:
        """The client's own headers (httpx gives their names in lower case) as lines of the head; no
        Accept-Encoding: the body is read as sent. Made again only when they change. None when one is
        not for this path (a line break, or a name a request sets itself)."""
        raw = inner.headers.raw
        if raw != block[0]:
            own = {k: v for k, v in inner.headers.items() if k not in ("accept-encoding", "connection")}
            fits = not _UNSAFE.search("".join(own) + "".join(own.values())) and not own.keys() & _PER_REQUEST
            block[:] = [raw, "".join(f"{k}: {v}\r\n" for k, v in own.items()) if fits else None]
        return cast(str | None, block[1])

    async def send(method: str, br: Any, auth: str | None) -> Any:
        path = br.url.lstrip("/")
        query = _query(br.params) if br.params else ""
        if not _PLAIN_PATH.fullmatch(path) or "/." in f"/{path}" or not _PLAIN_QUERY.fullmatch(query):
            return UNSENT
        own = header_block()
        content_type = "application/json" if br.data is not None else None
        if br.headers:
            if len(br.headers) != 1 or "Content-Type" not in br.headers:
                return UNSENT
            content_type = br.headers["Content-Type"]
        if own is None or (content_type is not None and _UNSAFE.search(content_type)):
            return UNSENT
        body = _json_encode(br.data) if br.data is not None else None
        fields = own + (f"content-type: {content_type}\r\n" if content_type is not None else "")
        target = prefix + path + ("?" + query if query else "")
        if br.timeout is None:
            connect, read = default_timeout
        else:
            t = httpx2.Timeout(br.timeout)
            connect, read = t.connect, t.read
        pool = transport._pool_for_loop(host, port, tls)
        retried = False
        while True:
            head = _head(br.method, target, netloc, fields, auth, body)
            if head is None:  # a header httpx would refuse (a line break, not latin-1): let it say so
                return UNSENT
            try:
                response = await pool.request(br.method, head + body if body is not None else head,
                                              connect_timeout=connect, read_timeout=read)
            except http1.HTTPError as e:
                REQUESTS.labels(br.method, "<error>").inc()
                raise _mapped_http1(e, httpx2.Request(br.method, base + target.lstrip("/"))) from e
            status = response.status
            counter = counters.get((br.method, status))
            if counter is None:
                counter = counters[(br.method, status)] = REQUESTS.labels(br.method, str(status))
            counter.inc()
            if status == 401 and not retried and auth is not None:
                refresh = getattr(inner.auth, "bearer_header", None)
                fresh = refresh(force=True) if callable(refresh) else auth
                if fresh != auth:
                    auth, retried = fresh, True
                    continue
            if 200 <= status < 300:
                if method != "list" and ANSWER_UNREAD.get():
                    return None
                return generic.handle_response(method, _Ok(response.body), br)
            answer = httpx2.Response(status_code=status, headers=response.headers, content=response.body,
                                     request=httpx2.Request(br.method, base + target.lstrip("/")))
            return generic.handle_response(method, answer, br)

    request.prepared = prepared  # type: ignore[attr-defined]
    return request


def install(client: Any) -> None:
    """Put an AiohttpTransport under a lightkube AsyncClient, with the TLS settings lightkube chose,
    the quicker request building of `fast_build_request` and the httpx-free `fast_request`."""
    generic = client._client  # lightkube internals: its GenericAsyncClient
    inner: httpx2.AsyncClient = generic._client  # and that one's httpx client
    old = inner._transport
    if isinstance(old, AiohttpTransport):
        return
    ctx = getattr(getattr(old, "_pool", None), "_ssl_context", None)
    transport = AiohttpTransport(ctx if isinstance(ctx, ssl.SSLContext) else True)
    inner._transport = transport
    inner.build_request = fast_build_request(inner)  # type: ignore[method-assign]
    generic.request = fast_request(generic, transport)
