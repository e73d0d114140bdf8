"""Prometheus metrics of the runtime, and the ``/metrics`` + ``/healthz`` + ``/readyz`` server.

All runtime metrics live in :data:`REGISTRY` (not prometheus_client's global one) so a
process exposes exactly what Isthmus defines, and components add theirs to the same
registry. Readiness is a set of named checks (e.g. "informers synced"); liveness is "the
event loop answers", plus optional checks.

`CacheView` and `InformerView` are what a component's metrics collector reads of its informers
(a component's `metrics.py` declares the rest of what it reads as a Protocol the component
satisfies, so the collector never imports the component back).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable
from typing import Any, Protocol

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "REGISTRY",
    "CacheView",
    "HealthServer",
    "InformerView",
    "parse_addr",
]

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
prometheus_client.ProcessCollector(registry=REGISTRY)
prometheus_client.PlatformCollector(registry=REGISTRY)
prometheus_client.GCCollector(registry=REGISTRY)

WORKQUEUE_DEPTH = Gauge(
    "isthmus_workqueue_depth", "Keys waiting in a work queue.", ["name"], registry=REGISTRY
)
WORKQUEUE_ADDS = Counter(
    "isthmus_workqueue_adds_total", "Keys added to a work queue.", ["name"], registry=REGISTRY
)
WORKQUEUE_RETRIES = Counter(
    "isthmus_workqueue_retries_total", "Rate-limited re-adds to a work queue.", ["name"], registry=REGISTRY
)
RECONCILE_TOTAL = Counter(
    "isthmus_reconcile_total",
    "Reconciles by controller and result (success, error, requeue, requeue_after).",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "isthmus_reconcile_errors_total", "Reconciles that raised.", ["controller"], registry=REGISTRY
)
RECONCILE_DURATION = Histogram(
    "isthmus_reconcile_duration_seconds",
    "Time spent in reconcile.",
    ["controller"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
ACTIVE_WORKERS = Gauge(
    "isthmus_controller_active_workers", "Workers currently reconciling.", ["controller"], registry=REGISTRY
)
INFORMER_RELISTS = Counter(
    "isthmus_informer_relists_total",
    "Informer lists by reason (initial, expired, error).",
    ["resource", "namespace", "reason"],
    registry=REGISTRY,
)
INFORMER_OBJECTS = Gauge(
    "isthmus_informer_objects", "Objects in an informer cache.", ["resource", "namespace"], registry=REGISTRY
)
INFORMER_EVENTS = Counter(
    "isthmus_informer_watch_events_total",
    "Watch events received, by type.",
    ["resource", "namespace", "type"],
    registry=REGISTRY,
)
LEADER = Gauge(
    "isthmus_leader_is_leader", "1 while this process holds the lease.", ["lease"], registry=REGISTRY
)
EVENTS_EMITTED = Counter(
    "isthmus_events_total",
    "Kubernetes Events written, by outcome (created, aggregated, failed; dropped: the recorder's buffer was full).",
    ["outcome"],
    registry=REGISTRY,
)

Check = Callable[[], bool]


class CacheView(Protocol):
    """What a metrics collector reads of an informer's cache (`informer.Cache` is one)."""

    def list(self) -> builtins.list[Any]: ...

    def index_keys(self, index: str, value: str, /) -> builtins.list[str]: ...


class InformerView(Protocol):
    """An informer, as a metrics collector sees it: its cache."""

    @property
    def cache(self) -> CacheView: ...


def parse_addr(addr: str) -> tuple[str, int]:
    """``"host:port"``, ``":port"`` (all interfaces, the Kubernetes convention) or ``"[v6]:port"``."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"metrics address {addr!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class HealthServer:
    """aiohttp server for ``/metrics``, ``/healthz`` and ``/readyz``.

    A check returns True when healthy; one raising counts as failing. ``/readyz`` is 200 only
    when every readiness check passes; the body lists each check, like kube-apiserver's.
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self._live: dict[str, Check] = {}
        self._ready: dict[str, Check] = {}
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    def add_liveness_check(self, name: str, check: Check) -> None:
        self._live[name] = check

    def add_readiness_check(self, name: str, check: Check) -> None:
        self._ready[name] = check

    def remove_readiness_check(self, name: str) -> None:
        self._ready.pop(name, None)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    async def start(self, addr: str) -> None:
        """Listen on ``addr`` (``host:port``; port 0 picks one, see :attr:`port`)."""
        host, port = parse_addr(addr)
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server  # the only way aiohttp exposes the bound port when port=0
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        log.info("metrics and health server listening", extra={"addr": f"{host}:{self.port}"})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return _report(self._live)

    async def _readyz(self, request: web.Request) -> web.Response:
        return _report(self._ready)


def _run_check(check: Check) -> bool:
    try:
        return bool(check())
    except Exception:
        log.exception("health check raised")
        return False


def _report(checks: dict[str, Check]) -> web.Response:
    results = {name: _run_check(c) for name, c in checks.items()}
    ok = all(results.values())
    lines = [
        f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}" for name, passed in results.items()
    ]
    lines.append("ok" if ok else "failed")
    return web.Response(status=200 if ok else 503, text="\n".join(lines) + "\n")
