"""The kubelet endpoint: the part of a kubelet's HTTP API the apiserver proxies to.

kube-apiserver serves ``pods/log``, ``exec``, ``attach`` and ``portforward`` by proxying to the
kubelet of the Pod's node, at the address and port its Node object publishes
(``status.addresses``, ``status.daemonEndpoints.kubeletEndpoint.port``). The embedded apiserver
does the same (apiserver/handlers/pods.py), and this is what answers: kube-lite's node.

- ``GET /containerLogs/{namespace}/{pod}/{container}``: the container's log (logs.py) with the
  kubelet's query (``follow``, ``tailLines``, ``sinceSeconds``, ``sinceTime``, ``timestamps``,
  ``limitBytes``, ``previous`` — the instance before a process container's last restart) and its
  plain-text errors;
- ``/exec``, ``/attach``, ``/portForward``: in runc mode served over WebSockets (streaming.py:
  ``runc exec``, the container's output, a connection inside the Pod's network namespace);
  otherwise refused with a ``Status`` (400 BadRequest) saying why — kube-lite's workloads are its
  own servers or processes, there is no container to enter — which the apiserver passes on as
  kube-apiserver passes on a kubelet's answer that is not an upgrade;
- ``GET /healthz``.

Like a kubelet it authenticates its caller: with a token (the cluster's, the one kube-lite uses
itself), only requests bearing it are served (401 otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from isthmus.local.kubelite.containers import is_isthmus_image
from isthmus.local.kubelite.logs import LogLine, PodLogs, rfc3339nano

if TYPE_CHECKING:
    from isthmus.local.kubelite.runc import RuncPod

__all__ = ["KubeletServer"]

log = logging.getLogger(__name__)

FOLLOW_CHECK_SECONDS = 1.0

PodLookup = Callable[[str, str], dict[str, Any] | None]
"""(namespace, name) → the Pod as this node runs it, or None."""


class _BadQuery(ValueError):
    pass


def _int(query: Any, key: str) -> int | None:
    raw = query.get(key)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise _BadQuery(key) from None


def _bool(query: Any, key: str) -> bool:
    return str(query.get(key, "")).lower() in ("true", "1")


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return web.Response(status=code, body=json.dumps(body).encode() + b"\n", content_type="application/json")


def _waiting_to_start(pod: dict[str, Any], container: str) -> str | None:
    """Why a container that never ran has no log yet (the kubelet's wording), None if it ran."""
    status = pod.get("status") or {}
    for s in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if s.get("name") != container:
            continue
        waiting = (s.get("state") or {}).get("waiting")
        if waiting is None or s.get("lastState") or s.get("containerID"):
            return None
        reason = str(waiting.get("reason") or "ContainerCreating")
        return "trying and failing to pull image" if reason in ("ErrImagePull", "ImagePullBackOff") else reason
    return None


class KubeletServer:
    """Serves one node's kubelet API on ``host:port`` (port 0: any free one; see :attr:`port`)."""

    def __init__(
        self,
        logs: PodLogs,
        lookup: PodLookup,
        *,
        node: str,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        runc_pod: Callable[[str, str], RuncPod | None] | None = None,
    ) -> None:
        """runc_pod: (namespace, name) → the runc side of a Pod (runc mode: exec, attach and
        port-forward are served); None: they are refused."""
        self.runc_pod = runc_pod
        self.logs = logs
        self.lookup = lookup
        self.node = node
        self.host = host
        self.port = port
        self.token = token
        self._runner: web.AppRunner | None = None
        self.following = 0
        """Open ``follow`` streams (each ends when its Pod's containers stop or its client leaves)."""

    async def start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        for verb in ("exec", "attach"):
            app.router.add_route("*", f"/{verb}/{{namespace}}/{{pod}}/{{container}}", self._stream)
        app.router.add_route("*", "/portForward/{namespace}/{pod}", self._stream)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        server = site._server
        socks = getattr(server, "sockets", None) or []
        if socks:
            self.port = socks[0].getsockname()[1]
        log.info("kubelet endpoint listening", extra={"address": f"{self.host}:{self.port}", "node": self.node})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.token:
            parts = request.headers.get("Authorization", "").split(" ", 1)
            ok = len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(
                parts[1].strip().encode(), self.token.encode())
            if not ok:
                return web.Response(status=401, text="Unauthorized")
        resp: web.StreamResponse = await handler(request)
        return resp

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def _pod(self, request: web.Request) -> tuple[str, str, dict[str, Any] | None]:
        ns, name = request.match_info["namespace"], request.match_info["pod"]
        return ns, name, self.lookup(ns, name)

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        """As the kubelet's getContainerLogs: 400 for a bad query, 404 for an unknown pod or
        container, 400 with the runtime's reason when there is nothing to read."""
        q = request.query
        try:
            tail = _int(q, "tailLines")
            since_seconds = _int(q, "sinceSeconds")
            limit = _int(q, "limitBytes")
        except _BadQuery:
            return web.Response(status=400, text='{"message": "Unable to decode query."}')
        since_time = q.get("sinceTime")
        since: float | None = None
        if since_time:
            try:
                since = datetime.fromisoformat(since_time.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return web.Response(status=400, text='{"message": "Unable to decode query."}')
        if (tail is not None and tail < 0) or (limit is not None and limit < 1) or (
            since_seconds is not None and (since_seconds < 1 or since_time)
        ):
            return web.Response(status=422, text='{"message": "Invalid request."}')
        if since_seconds is not None:
            since = time.time() - since_seconds
        ns, name, pod = self._pod(request)
        container = request.match_info["container"]
        if pod is None:
            return web.Response(status=404, text=f'pod "{name}" does not exist')
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
        if container not in names:
            return web.Response(status=404, text=f'container "{container}" not found in pod "{name}"')
        pod_log = self.logs.get(f"{ns}/{name}")
        if _bool(q, "previous"):
            # Only restarted process containers have a previous instance.
            clog = pod_log.previous.get(container) if pod_log is not None else None
            if clog is None:
                return web.Response(
                    status=400, text=f'previous terminated container "{container}" in pod "{name}" not found'
                )
        else:
            waiting = _waiting_to_start(pod, container)
            if waiting:
                return web.Response(
                    status=400, text=f'container "{container}" in pod "{name}" is waiting to start: {waiting}'
                )
            clog = pod_log.containers.get(container) if pod_log is not None else None
        if clog is None:
            return web.Response(
                status=400, text=f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        lines, index = clog.select(since=since, tail=tail)
        stamps = _bool(q, "timestamps")
        follow = _bool(q, "follow")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        left = limit

        async def send(batch: list[LogLine]) -> bool:
            """Write lines; False once limitBytes is reached."""
            nonlocal left
            chunk = b"".join(
                (rfc3339nano(ln.at).encode() + b" " + ln.data) if stamps else ln.data for ln in batch
            )
            if left is not None:
                chunk = chunk[:left]
                left -= len(chunk)
            if chunk:
                await resp.write(chunk)
            return left is None or left > 0

        more = await send(lines)
        self.following += follow
        try:
            while follow and more and not clog.closed:
                # aiohttp does not cancel a handler whose client left: look at the connection now and then.
                if request.transport is None or request.transport.is_closing():
                    return resp
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FOLLOW_CHECK_SECONDS):
                        await clog.wait(index)
                batch, index = clog.after(index)
                more = await send(batch)
        finally:
            self.following -= follow
        await resp.write_eof()
        return resp

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        """exec, attach, port-forward: served in runc mode over WebSockets (streaming.py), refused
        otherwise (and for SPDY, which is not spoken)."""
        from isthmus.local.kubelite import streaming

        verb = request.path.split("/", 2)[1]
        ns, name, pod = self._pod(request)
        runc_pod = self.runc_pod(ns, name) if self.runc_pod is not None and pod is not None else None
        if runc_pod is None or pod is None:
            return await self._refuse(request)
        running = None
        if verb != "portForward":
            container = request.match_info["container"]
            running = runc_pod.container(container)
            if running is None:
                return web.Response(status=400, text=f'container "{container}" in pod "{name}" is not running')
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return _status(400, "BadRequest", f"node {self.node} (isthmus kube-lite) speaks the WebSocket streaming "
                           f"protocols ({', '.join(streaming.EXEC_PROTOCOLS)}) only, not SPDY: use kubectl 1.30 or later")
        if running is None:
            from isthmus.local.kubelite import spdy

            if spdy.offered(request):  # kubectl port-forward: SPDY tunnelled in the WebSocket
                return await spdy.port_forward_tunnel(request, runc_pod.netns_path)
            return await streaming.port_forward(request, runc_pod.netns_path)
        if verb == "exec":
            return await streaming.exec_in(request, runc_pod, running)
        pod_log = self.logs.get(f"{ns}/{name}")
        return await streaming.attach(request, pod_log.containers.get(container) if pod_log else None, running)

    async def _refuse(self, request: web.Request) -> web.Response:
        verb = request.path.split("/", 2)[1]
        ns, name, pod = self._pod(request)
        if pod is None:
            return web.Response(status=404, text=f'pod "{name}" does not exist')
        what = {"exec": "exec into", "attach": "attach to", "portForward": "forward ports of"}[verb]
        ip = (pod.get("status") or {}).get("podIP")
        hint = (
            f"; its ports are reachable on this machine at its pod IP {ip}"
            if verb == "portForward" and ip
            else "; `kubectl logs` shows what it prints"
        )
        how = (
            "runs its containers as plain processes of this machine, without a container runtime"
            if any(is_isthmus_image(c.get("image")) for c in (pod.get("spec") or {}).get("containers") or [])
            else "runs its workloads as its own servers, not as containers of a container runtime"
        )
        return _status(
            400, "BadRequest", f"node {self.node} (isthmus kube-lite) cannot {what} pod {ns}/{name}: kube-lite {how}{hint}"
        )
