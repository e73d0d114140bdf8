"""The web view's HTTP server (aiohttp): the page, its data, live updates. Read-only: every route is
a GET; nothing here writes to a cluster.

- `/`, `/static/*`: the page (static/: HTML, JS, CSS shipped in the package, no build step, nothing
  fetched from elsewhere at run time);
- `/api/snapshot`: the whole view as JSON;
- `/api/events`: server-sent events: `snapshot` (the whole view) on connect, then `delta`s
  (model.diff) as watches report changes, coalesced over `COALESCE` seconds;
- `/api/object?cluster=&kind=&namespace=&name=`: one object's YAML and conditions from the watch
  cache, the conditions that tell its state when it has none (a ServiceImport: its exports' in
  every cluster), and its Events read from that cluster's API now (on demand, not polled);
- `/healthz`, `/readyz`.

Bound to loopback, the server answers only requests addressed to a loopback name, so a web page
elsewhere cannot read the clusterset through the browser by rebinding its own name to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from lightkube.resources.core_v1 import Event

from isthmus.kube.client import is_loopback_host
from isthmus.kube.helpers import describe_error
from isthmus.ui.kinds import BY_KIND
from isthmus.ui.model import Store, build_view, conditions, diff, related_conditions
from isthmus.ui.watch import ClusterWatch, Source, plain

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
COALESCE = 0.05
"""Changes within this many seconds go out as one delta (a relist brings hundreds at once)."""
KEEPALIVE = 15.0
"""An SSE comment this often keeps proxies and the browser from closing an idle stream."""
SUBSCRIBER_BACKLOG = 256
"""Deltas a slow browser may lag behind before it is dropped (its EventSource reconnects and gets a
fresh snapshot)."""
EVENTS_TIMEOUT = 5.0
MAX_EVENTS = 50


class UiServer:
    """Watches `sources`, keeps the view, serves it on `host:port` (port 0: any free port), or on
    the listening socket `sock` it was handed (socket activation: `host`, `port` then name it)."""

    def __init__(self, sources: list[Source], host: str = "127.0.0.1", port: int = 0,
                 clients: dict[str, Any] | None = None, sock: socket.socket | None = None) -> None:
        self.sources = sources
        self.host = host
        self.port = port
        self.sock = sock
        self.store = Store()
        self.view: dict[str, dict[str, Any]] = build_view(self.store)
        self.watches = [ClusterWatch(s, self.store, self._changed, (clients or {}).get(s.name)) for s in sources]
        self._subscribers: set[asyncio.Queue[str | None]] = set()
        self._flush_handle: asyncio.TimerHandle | None = None
        self._runner: web.AppRunner | None = None
        self._started = False

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._started

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def start(self) -> None:
        for s in self.sources:
            self.store.add_cluster(s.name, s.role, s.server)
        self.view = build_view(self.store)
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._index)
        app.router.add_get("/api/snapshot", self._snapshot)
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/api/object", self._object)
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/readyz", self._ok)
        app.router.add_static("/static/", STATIC, follow_symlinks=False)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site: web.BaseSite = (web.TCPSite(self._runner, self.host, self.port) if self.sock is None
                              else web.SockSite(self._runner, self.sock))
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            self._runner = None
            raise
        server = getattr(site, "_server", None)
        if self.port == 0 and server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        for w in self.watches:  # only once the port is ours: a taken port starts nothing
            w.start()
        self._started = True
        log.info("serving the clusterset view", extra={"url": self.url,
                                                      "clusters": [s.name for s in self.sources]})

    async def stop(self) -> None:
        self._started = False
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        for q in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
        await asyncio.gather(*(w.stop() for w in self.watches))

    # --- model → browsers -----------------------------------------------------------------------

    def _changed(self) -> None:
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(COALESCE, self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        new = build_view(self.store)
        delta = diff(self.view, new)
        self.view = new
        if delta is None:
            return
        message = _sse("delta", {"delta": delta, "serverTime": _now()})
        for q in list(self._subscribers):
            try:
                q.put_nowait(message)
            except asyncio.QueueFull:  # too far behind: let it reconnect for a fresh snapshot
                self._subscribers.discard(q)
                q.get_nowait()
                q.put_nowait(None)

    def snapshot(self) -> dict[str, Any]:
        return {"view": self.view, "serverTime": _now(),
                "clusters": [{"name": s.name, "role": s.role, "server": s.server} for s in self.sources]}

    # --- HTTP -----------------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET"])
        if is_loopback_host(self.host) and not _loopback_host_header(request.host):
            raise web.HTTPMisdirectedRequest(text="this server answers only requests to a loopback address\n")
        response: web.StreamResponse = await handler(request)
        response.headers.setdefault(
            "Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def _snapshot(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        queue: asyncio.Queue[str | None] = asyncio.Queue(SUBSCRIBER_BACKLOG)
        # Snapshot and subscription in one step (no await between): no delta is lost or doubled.
        first = _sse("snapshot", self.snapshot())
        self._subscribers.add(queue)
        try:
            await response.write(first.encode())
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE):  # not wait_for: 3.11's can swallow a cancel
                        message = await queue.get()
                except TimeoutError:
                    message = ": keep-alive\n\n"
                if message is None:
                    break
                await response.write(message.encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._subscribers.discard(queue)
        return response

    async def _object(self, request: web.Request) -> web.Response:
        q = request.query
        cluster, kind, name = q.get("cluster", ""), q.get("kind", ""), q.get("name", "")
        namespace = q.get("namespace") or None
        if kind not in BY_KIND:
            raise web.HTTPBadRequest(text=f"unknown kind {kind!r}\n")
        obj = self.store.get(cluster, kind, namespace, name)
        if obj is None:
            raise web.HTTPNotFound(text=f"{kind} {namespace + '/' if namespace else ''}{name} not in {cluster!r}\n")
        events, events_error = await self._events_of(cluster, kind, obj)
        return web.json_response({
            "ref": {"cluster": cluster, "kind": kind, "namespace": namespace, "name": name},
            "yaml": yaml.safe_dump(obj, sort_keys=False, default_flow_style=False),
            "conditions": conditions(obj), "events": events, "eventsError": events_error,
            "related": related_conditions(self.store, kind, namespace, name),
        })

    async def _events_of(self, cluster: str, kind: str, obj: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
        watch = next((w for w in self.watches if w.name == cluster), None)
        if watch is None:
            return [], f"{cluster!r} is not watched"
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"  # client-go files cluster-scoped objects' Events there
        out = []
        name = str(meta.get("name") or "")
        try:
            async with asyncio.timeout(EVENTS_TIMEOUT):
                async for ev in watch.client.list(Event, namespace=namespace, fields={"involvedObject.name": name}):
                    e = plain(ev)
                    involved = e.get("involvedObject") or {}
                    if involved.get("kind") not in (None, kind) or involved.get("name") != name:
                        continue
                    out.append({"type": e.get("type"), "reason": e.get("reason"), "message": e.get("message"),
                                "count": e.get("count") or 1,
                                "last": e.get("lastTimestamp") or e.get("eventTime")
                                or (e.get("metadata") or {}).get("creationTimestamp")})
        except Exception as err:
            return [], f"cannot read the Events: {describe_error(err)}"
        out.sort(key=lambda e: str(e["last"] or ""), reverse=True)
        return out[:MAX_EVENTS], None


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _loopback_host_header(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return is_loopback_host(name)
