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

from isthmus.apiserver import errors, table
from isthmus.apiserver.errors import ApiError
from isthmus.apiserver.handlers.common import HandlerContext, output, truthy
from isthmus.apiserver.handlers.get import (
    parse_resource_version,
    selection,
    validate_list_options,
    wait_for_resource_version,
)
from isthmus.apiserver.handlers.scope import RequestScope
from isthmus.apiserver.resources import ResourceInfo

Obj = dict[str, Any]
EVENT_CACHE_SIZE = 4096


def _encode_event(ctx: HandlerContext, info: ResourceInfo, etype: str, obj: Obj, as_table: bool) -> bytes:
    if as_table:
        body: Any = table.to_table(info, [output(info, obj)], resource_version=obj["metadata"].get(
            "resourceVersion", ""), include_object="Object")
        return orjson.dumps({"type": etype, "object": body}) + b"\n"
    # Every watcher of a resource sends the same line for an event: encode it once.
    cache = ctx.event_cache
    ck = (int(obj["metadata"].get("resourceVersion") or 0), etype + info.api_version)
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
        for obj in initial:
            await resp.write(_encode_event(ctx, info, "ADDED", obj, as_table))
        if initial_events and bookmarks:
            await resp.write(_bookmark(info, start_rv, initial_end=True))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout > 0 else None
        it = watch.__aiter__()
        last_rv = start_rv
        while True:
            wait: float | None = ctx.bookmark_interval if bookmarks else None
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    break
                wait = left if wait is None else min(wait, left)
            try:
                ev = await asyncio.wait_for(it.__anext__(), wait)
            except TimeoutError:
                if bookmarks:
                    last_rv = max(last_rv, ctx.storage.rv)
                    await resp.write(_bookmark(info, last_rv))
                continue
            except StopAsyncIteration:
                break
            if ev.rv <= start_rv:
                continue  # a resourceVersion not reached yet: only what comes after it (kube's cacheWatcher)
            last_rv = ev.rv
            await resp.write(_encode_event(ctx, info, ev.type, ev.obj, as_table))
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        if watch is not None:
            watch.close()
    with contextlib.suppress(Exception):
        await resp.write_eof()
    return resp
