"""`kubectl port-forward` in runc mode: the SPDY/3.1 port-forward protocol, tunnelled in a WebSocket.

kubectl (1.30+) opens ``pods/portforward`` as a WebSocket with the subprotocol
``SPDY/3.1+portforward.k8s.io`` (KEP-4006): each binary message carries a slice of an SPDY/3.1
byte stream in which kubectl is the client. For every local connection it opens two streams
(``SYN_STREAM`` with the headers ``streamtype: error|data``, ``port``, ``requestid``) and waits for
each one's ``SYN_REPLY``; the data stream then carries the connection's bytes both ways (``DATA``
frames, ``FLAG_FIN`` for a half close) and anything written on the error stream is shown to the
user as a forwarding error. The node dials 127.0.0.1:<port> inside the Pod's network namespace,
as containerd's port forward enters the sandbox's.

Only what that needs is spoken: SYN_STREAM/SYN_REPLY, DATA, RST_STREAM, PING (answered),
SETTINGS, WINDOW_UPDATE and GOAWAY (read and ignored: no flow control is enforced). Header blocks
are zlib-compressed with SPDY/3's fixed dictionary (draft-mbelshe-httpbis-spdy-00, 2.6.10.1),
rebuilt below from its word list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import zlib
from typing import Any

from aiohttp import WSMsgType, web

__all__ = ["TUNNEL_PROTOCOL", "port_forward_tunnel"]

log = logging.getLogger(__name__)

TUNNEL_PROTOCOL = "SPDY/3.1+portforward.k8s.io"
VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
CHUNK = 32 * 1024

_WORDS = [*(
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
    "allow authorization cache-control connection content-base content-encoding content-language content-length "
    "content-location content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status"
).split(), "200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()


def _control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def _data(stream: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">II", stream & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload


class _Session:
    """One tunnel: frames in from the WebSocket, streams paired by requestid, connections out."""

    def __init__(self, ws: web.WebSocketResponse, netns_path: str, ports: list[int]) -> None:
        self.ws = ws
        self.netns_path = netns_path
        self.ports = ports
        self.inflate = zlib.decompressobj(zdict=DICTIONARY)
        self.deflate = zlib.compressobj(zdict=DICTIONARY)
        self.buffer = b""
        self.pairs: dict[str, dict[str, int]] = {}
        """requestid → {"error": stream, "data": stream}."""
        self.writers: dict[int, asyncio.StreamWriter] = {}
        """data stream → the connection in the Pod."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.lock = asyncio.Lock()

    async def send(self, frame: bytes) -> None:
        async with self.lock:
            if not self.ws.closed:
                await self.ws.send_bytes(frame)

    def _header_block(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers)) + b"".join(
            struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode() for k, v in headers.items())
        return self.deflate.compress(raw) + self.deflate.flush(zlib.Z_SYNC_FLUSH)

    def _headers(self, block: bytes) -> dict[str, str]:
        raw = self.inflate.decompress(block)
        (n,), pos, out = struct.unpack_from(">I", raw), 4, {}
        for _ in range(n):
            (klen,) = struct.unpack_from(">I", raw, pos)
            key = raw[pos + 4:pos + 4 + klen].decode()
            pos += 4 + klen
            (vlen,) = struct.unpack_from(">I", raw, pos)
            out[key.lower()] = raw[pos + 4:pos + 4 + vlen].decode().split("\0")[0]
            pos += 4 + vlen
        return out

    async def run(self) -> None:
        async for msg in self.ws:
            if msg.type != WSMsgType.BINARY:
                break
            self.buffer += msg.data
            while len(self.buffer) >= 8:
                length = struct.unpack_from(">I", self.buffer, 4)[0] & 0xFFFFFF
                if len(self.buffer) < 8 + length:
                    break
                frame, self.buffer = self.buffer[:8 + length], self.buffer[8 + length:]
                if await self._frame(frame) is False:
                    return

    async def _frame(self, frame: bytes) -> bool:
        first, flags, payload = struct.unpack_from(">I", frame)[0], frame[4], frame[8:]
        if not first & 0x80000000:  # DATA
            stream = first & 0x7FFFFFFF
            w = self.writers.get(stream)
            if w is not None:
                if payload:
                    w.write(payload)
                    with contextlib.suppress(ConnectionError):
                        await w.drain()
                if flags & FLAG_FIN and w.can_write_eof():
                    with contextlib.suppress(OSError):
                        w.write_eof()
            return True
        kind = first & 0xFFFF
        if kind == SYN_STREAM:
            stream = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            headers = self._headers(payload[10:])
            await self.send(_control(SYN_REPLY, 0, struct.pack(">I", stream) + self._header_block({})))
            await self._stream(stream, headers)
        elif kind == PING:
            await self.send(_control(PING, 0, payload[:4]))
        elif kind == RST_STREAM:
            stream = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            w = self.writers.pop(stream, None)
            if w is not None:
                w.close()
        elif kind == GOAWAY:
            return False
        elif kind == HEADERS:
            self._headers(payload[4:])  # keeps the inflate context in step
        return True

    async def _stream(self, stream: int, headers: dict[str, str]) -> None:
        pair = self.pairs.setdefault(headers.get("requestid", ""), {})
        pair[headers.get("streamtype", "")] = stream
        if "error" not in pair or "data" not in pair:
            return
        request = self.pairs.pop(headers.get("requestid", ""))
        try:
            port = int(headers.get("port", ""))
        except ValueError:
            await self._fail(request, f"invalid port {headers.get('port')!r}")
            return
        from isthmus.runtime import netns

        try:
            reader, writer = await netns.open_connection_in(self.netns_path, "127.0.0.1", port)
        except OSError as e:
            why = os.strerror(e.errno).lower() if e.errno else str(e)
            await self._fail(request, f"error forwarding port {port} to pod: dial tcp 127.0.0.1:{port}: connect: {why}")
            return
        self.writers[request["data"]] = writer

        async def pump() -> None:
            try:
                while data := await reader.read(CHUNK):
                    await self.send(_data(request["data"], 0, data))
            except OSError:
                pass
            finally:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await self.send(_data(request["data"], FLAG_FIN, b""))
                    await self.send(_data(request["error"], FLAG_FIN, b""))

        task = asyncio.create_task(pump())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _fail(self, request: dict[str, int], message: str) -> None:
        await self.send(_data(request["error"], 0, message.encode()))
        await self.send(_data(request["error"], FLAG_FIN, b""))
        await self.send(_data(request["data"], FLAG_FIN, b""))

    async def close(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        for w in self.writers.values():
            w.close()


async def port_forward_tunnel(request: web.Request, netns_path: str) -> web.StreamResponse:
    """Serve one `kubectl port-forward` tunnel until kubectl goes."""
    ports = [int(p) for p in request.query.getall("ports", []) if p.isdigit()]
    ws = web.WebSocketResponse(protocols=(TUNNEL_PROTOCOL,), max_msg_size=0, autoping=True)
    await ws.prepare(request)
    session = _Session(ws, netns_path, ports)
    try:
        await session.run()
    except (zlib.error, struct.error, UnicodeDecodeError) as e:
        log.warning("port-forward tunnel ended on a bad frame", extra={"error": str(e)})
    finally:
        await session.close()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.close()
    return ws


def offered(request: web.Request) -> bool:
    """Whether the client asks for the SPDY tunnel (kubectl port-forward)."""
    protocols: Any = request.headers.get("Sec-WebSocket-Protocol", "")
    return TUNNEL_PROTOCOL in [p.strip() for p in str(protocols).split(",")]
