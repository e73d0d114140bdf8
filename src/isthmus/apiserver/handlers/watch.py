"""Watches: the initial state (resourceVersion unset or "0", or sendInitialEvents), then the changes.

An object leaving the selector is a DELETED event (the storage's watch does that); a version
older than the retained history is an ERROR event with a 410 Expired Status; bookmarks every
`bookmark_interval` when asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from aiohttp import web

from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.handlers.common import HandlerContext, output, truthy
from isthmus.apiserver.handlers.get import (
    parse_resource_version,
    selection,
    validate_list_options,
    wait_for_resource_version,
)
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.registry import table
from isthmus.apiserver.registry.resources import ResourceInfo
from isthmus.apiserver.storage.watch import Watch

Obj = dict[str, Any]
EVENT_CACHE_SIZE = 4096
WRITE_SPACING = 0.005
"""A watcher that wrote less than this long ago waits out the rest before its next write, so a busy
stream sends several events per write (each write is a TLS record and a send here, and a wake-up,
a TLS record and a read at the client) while a quiet one still writes at once: at most 5 ms more
latency, and only under load."""


def _encode_event(ctx: HandlerContext, info: ResourceInfo, etype: str, obj: Obj, as_table: bool,
                  rv: int | None = None) -> bytes:
    if as_table:
        body: Any = table.to_table(info, [output(info, obj)], resource_version=obj["metadata"].get(
            "resourceVersion", ""), include_object="Object")
        return orjson.dumps({"type": etype, "object": body}) + b"\n"
    # Every watcher of a resource sends the same line for an event: encode it once.
    cache = ctx.event_cache
    if rv is None:
        rv = int(obj["metadata"].get("resourceVersion") or 0)
    ck = (rv, etype + info.api_version)
    hit = cache.get(ck)
    if hit is None:
        if len(cache) > EVENT_CACHE_SIZE:
            cache.clear()
        hit = b'{"type":"' + etype.encode() + b'","object":' + orjson.dumps(output(info, obj)) + b"}\n"
        cache[ck] = hit
    return hit


def _bookmark(info: ResourceInfo, rv: int, initial_end: bool = False) -> bytes:
    m: Obj = {"resourceVersion": str(rv)}
    if initial_end:
        m["annotations"] = {"k8s.io/initial-events-end": "true"}
    return orjson.dumps({"type": "BOOKMARK", "object": {"kind": info.kind, "apiVersion": info.api_version,
                                                         "metadata": m}}) + b"\n"


class _Body:
    """The watch's chunked body, written straight to the transport once the headers are out.

    A watcher's wake-up writes one chunk: aiohttp's `write` would add two coroutine frames, a
    chunk header built by an f-string and a join per write, about a tenth of an event's cost at
    100 watchers. Flow control is aiohttp's: past 64 KiB queued, wait until the socket drains."""

    __slots__ = ("_transport", "_writer")

    def __init__(self, resp: web.StreamResponse, transport: asyncio.Transport | None) -> None:
        self._writer: Any = resp._payload_writer  # aiohttp's: its drain() and the chunked framing we follow
        self._transport = transport

    async def write(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the watcher went away")
        transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        if transport.get_write_buffer_size() > 65536:
            await self._writer.drain()


async def _stream(ctx: HandlerContext, info: ResourceInfo, resp: _Body | web.StreamResponse, watch: Watch, start_rv: int,
                  as_table: bool, bookmarks: bool, timeout_seconds: float) -> None:
    """The live part of a watch until it ends, times out (timeoutSeconds) or the client goes.

    Each wake-up sends every event ready by then in one write (one chunk, one send), so a
    burst of writes costs one socket write per watcher, not one per event. Timeouts and
    bookmarks come from one timer per watch, checked and re-armed only when it fires (a timer
    or a task per event would cost more than the event itself): a bookmark goes out after
    `bookmark_interval` without events, as before."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds if timeout_seconds > 0 else None
    interval = ctx.bookmark_interval if bookmarks else None
    timed = deadline is not None or interval is not None
    last_rv = start_rv
    quiet_since = loop.time()  # when the last event or bookmark went out (kept only for bookmarks)
    timer: asyncio.TimerHandle | None = None
    fired = False

    def fire() -> None:
        nonlocal timer, fired
        timer, fired = None, True
        watch.wake()

    last_write = -WRITE_SPACING
    try:
        while True:
            if watch.ready and (wait := last_write + WRITE_SPACING - loop.time()) > 0:
                await asyncio.sleep(wait)
            batch = watch.drain()
            if batch:
                lines = []
                for ev in batch:
                    if ev.rv <= start_rv:
                        continue  # a resourceVersion not reached yet: only what comes after it (kube's cacheWatcher)
                    last_rv = ev.rv
                    lines.append(_encode_event(ctx, info, ev.type, ev.obj, as_table, ev.rv))
                if lines:
                    await resp.write(lines[0] if len(lines) == 1 else b"".join(lines))
                    last_write = loop.time()
                if interval is not None:
                    quiet_since = loop.time()
            elif watch.done:
                return
            if fired or (timed and timer is None):
                fired = False
                now = loop.time()
                if deadline is not None and now >= deadline:
                    return
                if interval is not None and now - quiet_since >= interval:
                    last_rv = max(last_rv, ctx.storage.rv)
                    await resp.write(_bookmark(info, last_rv))
                    quiet_since = loop.time()
                due = [t for t in (deadline, None if interval is None else quiet_since + interval) if t is not None]
                if timer is None and due:
                    timer = loop.call_at(min(due), fire)
            await watch.wait()
    finally:
        if timer is not None:
            timer.cancel()


async def watch_resource(ctx: HandlerContext, scope: RequestScope) -> web.StreamResponse:
    request, info, namespace, as_table = scope.request, scope.info, scope.namespace, scope.as_table
    q = request.query
    validate_list_options(q, watch=True)
    match = selection(request, info, scope.name)
    rv_param = q.get("resourceVersion") or ""
    bookmarks = truthy(q.get("allowWatchBookmarks"))
    initial_events = truthy(q.get("sendInitialEvents"))
    timeout = float(q.get("timeoutSeconds") or 0)
    resp = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"})
    resp.enable_chunked_encoding()
    initial: list[Obj] = []
    error: ApiError | None = None
    watch = None
    if initial_events and rv_param not in ("", "0"):
        # the initial state must be at least that recent: kube waits for it, else an ERROR event
        try:
            await wait_for_resource_version(ctx, parse_resource_version(rv_param))
        except ApiError as e:
            if e.code != 504:
                raise
            error = e
    # Listing and registering the watch happen without an await, so no event can fall between them.
    if error is not None:
        pass
    elif rv_param in ("", "0") or initial_events:
        initial = ctx.storage.list(info.key, namespace)
        if match is not None:
            initial = [o for o in initial if match(o)]
        start_rv = ctx.storage.rv
        watch = ctx.storage.watch(info.key, namespace, start_rv, match)
    else:
        try:
            start_rv = int(rv_param)
        except ValueError:
            raise errors.bad_request(f"invalid resource version: {rv_param!r}") from None
        try:
            watch = ctx.storage.watch(info.key, namespace, start_rv, match)
        except ApiError as e:
            error = e
    await resp.prepare(request)
    try:
        if error is not None:
            await resp.write(error.watch_event())
            return resp
        assert watch is not None
        pending: list[bytes] = []
        size = 0
        for obj in initial:  # written in chunks of about 64 KiB, not a write per object
            line = _encode_event(ctx, info, "ADDED", obj, as_table)
            pending.append(line)
            size += len(line)
            if size >= 65536:
                await resp.write(b"".join(pending))
                pending, size = [], 0
        if pending:
            await resp.write(b"".join(pending))
        if initial_events and bookmarks:
            await resp.write(_bookmark(info, start_rv, initial_end=True))
        body = _Body(resp, request.transport) if resp.chunked and not resp.compression else resp
        await _stream(ctx, info, body, watch, start_rv, as_table, bookmarks, timeout)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        if watch is not None:
            watch.close()
    with contextlib.suppress(Exception):
        await resp.write_eof()
    return resp
