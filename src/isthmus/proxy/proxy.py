"""The proxy as a component: informers → table → listeners (or nftables rules), reconciled live.

Any change to a Service, EndpointSlice or ServiceImport marks its `ns/name` dirty; dirty services
are rebuilt on the next loop iteration (coalescing bursts) from what the caches hold *now* and the
merged table is applied: new listeners start binding, gone ones stop accepting (relayed TCP
connections keep their backend until they end), kept ones get the new endpoint set in place so
ClientIP pins to surviving backends hold. Binding retries with backoff forever — an address held
by something else, or one not local yet, must not take the proxy down.

In the nftables mode the merged table goes to `NftablesDataplane` instead of listeners: one task
applies the latest table as one transaction, retrying with the same backoff.

The CLI, `isthmus up` and the tests all start the proxy through `ProxyService`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import (
    SOURCE_CLUSTER_LABEL,
    ServiceImport,
    effective_preference,
    traffic_distribution,
    unknown_import_distribution,
)
from isthmus.api.mcs import unknown_affinity as affinity_value_unknown
from isthmus.kube import keys
from isthmus.kube.resources import resource_for
from isthmus.proxy import splice
from isthmus.proxy.balancer import Balancer
from isthmus.proxy.metrics import ListenerStats, ProxyStats
from isthmus.proxy.nftables import NftablesDataplane, NftablesError
from isthmus.proxy.socketlb import open_socket_lb
from isthmus.proxy.table import (
    DEFAULT_AFFINITY_TIMEOUT,
    Backend,
    EndpointSnap,
    ImportSnap,
    ListenerKey,
    Port,
    ServiceSnap,
    SliceSnap,
    Target,
    merge_targets,
    service_targets,
)
from isthmus.proxy.tcp import DEFAULT_CONNECT_TIMEOUT, TcpListener
from isthmus.proxy.udp import DEFAULT_IDLE_TIMEOUT, UdpListener
from isthmus.runtime import HealthServer, Informer, SharedInformerFactory, object_labels
from isthmus.runtime.dirty import DirtyKeys

__all__ = [
    "ProxyConfig",
    "ProxyService",
    "bind_socket",
    "import_snapshot",
    "service_snapshot",
    "slice_snapshot",
    "unknown_affinity",
]

log = logging.getLogger(__name__)

MCS_SLICE_INDEX = "proxy-mcs-service"
KUBE_SLICE_INDEX = "proxy-kube-service"


# --- API objects → snapshots ---------------------------------------------------------------------


def _affinity(kind: Any, config: Any) -> int | None:
    if kind != "ClientIP":
        return None
    timeout = config.get("timeoutSeconds") if isinstance(config, dict) else None
    return timeout if isinstance(timeout, int) and timeout > 0 else DEFAULT_AFFINITY_TIMEOUT


def _created(meta: Any) -> float:
    """metadata.creationTimestamp as epoch seconds; 0 when unset (a fake or not yet stored object)."""
    ts = getattr(meta, "creationTimestamp", None) if meta is not None else None
    return ts.timestamp() if isinstance(ts, datetime) else 0.0


def service_snapshot(svc: Service) -> ServiceSnap:
    """A Service as the table needs it; headless and ExternalName services get no ClusterIP."""
    meta, spec = svc.metadata, svc.spec
    assert meta is not None
    if spec is None:
        return ServiceSnap(meta.namespace or "", meta.name or "")
    ips: tuple[str, ...] = ()
    if spec.type != "ExternalName" and spec.clusterIP not in (None, "", "None"):
        ips = tuple(ip for ip in (spec.clusterIPs or [spec.clusterIP]) if ip and ip != "None")
    cfg = spec.sessionAffinityConfig
    client_ip = cfg.clientIP if cfg is not None else None
    timeout_cfg = {"timeoutSeconds": client_ip.timeoutSeconds} if client_ip is not None else None
    return ServiceSnap(
        namespace=meta.namespace or "",
        name=meta.name or "",
        type=spec.type or "ClusterIP",
        cluster_ips=ips,
        ports=tuple(
            Port(p.name or "", p.protocol or "TCP", p.port, p.nodePort) for p in spec.ports or () if p.port
        ),
        affinity_timeout=_affinity(spec.sessionAffinity, timeout_cfg),
        created=_created(meta),
    )


def slice_snapshot(obj: EndpointSlice, cluster: str = "") -> SliceSnap:
    endpoints = []
    for ep in obj.endpoints or ():
        c = ep.conditions
        ready = c is None or c.ready is None or bool(c.ready)  # nil means ready (API doc)
        serving = c is None or c.serving is None or bool(c.serving)
        terminating = c is not None and bool(c.terminating)
        endpoints.append(EndpointSnap(tuple(ep.addresses or ()), ready, serving, terminating))
    ports = tuple(
        Port(p.name or "", p.protocol or "TCP", p.port) for p in obj.ports or () if isinstance(p.port, int)
    )
    return SliceSnap(tuple(endpoints), ports, cluster, obj.addressType or "IPv4")


def import_snapshot(obj: Any) -> ImportSnap:
    """A ServiceImport (lightkube generic dict); tolerant of missing fields."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ports = tuple(
        Port(str(p.get("name") or ""), str(p.get("protocol") or "TCP"), p["port"])
        for p in spec.get("ports") or ()
        if isinstance(p.get("port"), int)
    )
    cfg = (spec.get("sessionAffinityConfig") or {}).get("clientIP")
    return ImportSnap(
        namespace=obj.metadata.namespace or "",
        name=obj.metadata.name or "",
        type=str(spec.get("type") or "ClusterSetIP"),
        ips=tuple(str(ip) for ip in spec.get("ips") or () if ip),
        ports=ports,
        affinity_timeout=_affinity(spec.get("sessionAffinity"), cfg),
        clusters=tuple(str(c["cluster"]) for c in status.get("clusters") or () if c.get("cluster")),
        created=_created(obj.metadata),
        locality=effective_preference(obj.metadata.annotations, traffic_distribution(spec)),
    )


def unknown_affinity(obj: Any) -> str | None:
    """The isthmus.io/affinity value of a ServiceImport if it is set but not one the proxy knows."""
    return affinity_value_unknown(obj.metadata.annotations if obj is not None else None)


# --- sockets -------------------------------------------------------------------------------------


def bind_socket(key: ListenerKey, reuse_port: bool = False) -> socket.socket:
    """A bound, non-blocking socket for `key` (not yet listening); OSError when the address is taken.

    TCP sets SO_REUSEADDR (restart while old connections sit in TIME_WAIT). UDP does not: on Linux
    it would let a second proxy silently share a ClusterIP. VIPs set SO_REUSEPORT on purpose.
    """
    family = socket.AF_INET6 if ":" in key.ip else socket.AF_INET
    kind = socket.SOCK_STREAM if key.protocol == "TCP" else socket.SOCK_DGRAM
    # IPPROTO_TCP named (accepted sockets inherit it): asyncio sets TCP_NODELAY only then.
    sock = socket.socket(family, kind, socket.IPPROTO_TCP if kind == socket.SOCK_STREAM else 0)
    try:
        if kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((key.ip, key.port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


# --- listeners -----------------------------------------------------------------------------------


class _Listener:
    """One wanted listener: its balancer, its server once bound, and the bind-retry task."""

    def __init__(self, proxy: ProxyService, key: ListenerKey, target: Target) -> None:
        self.proxy = proxy
        self.key = key
        self.target = target
        self.balancer = Balancer(target.backends, target.affinity_timeout)
        self.stats = self._stats_for(target)
        cfg = proxy.config
        self.server: TcpListener | UdpListener = (
            TcpListener(self.balancer, self.stats, connect_timeout=cfg.connect_timeout, kernel=proxy.kernel)
            if key.protocol == "TCP"
            else UdpListener(self.balancer, self.stats, idle_timeout=cfg.udp_idle_timeout)
        )
        self.bound = False
        self.failures = 0
        proxy.balance(key, target)
        proxy.stats.pending += 1
        self._task = asyncio.get_running_loop().create_task(self._bind(), name=f"proxy bind {key}")

    def _stats_for(self, target: Target) -> ListenerStats:
        return self.proxy.stats.for_listener(target.service, target.port_name, self.key.protocol, target.kind)

    def retarget(self, target: Target) -> None:
        if target == self.target:
            return
        old, self.target = self.target, target
        self.balancer.update(target.backends, target.affinity_timeout)
        self.proxy.balance(self.key, target)
        if (old.service, old.port_name, old.kind) != (target.service, target.port_name, target.kind):
            self.stats = self.server.stats = self._stats_for(target)
        if isinstance(self.server, UdpListener) and old.backends != target.backends:
            self.server.backends_changed()

    async def _bind(self) -> None:
        cfg = self.proxy.config
        delay = cfg.bind_backoff_base
        while True:
            try:
                sock = bind_socket(self.key, self.target.reuse_port)
                try:
                    await self.server.start(sock)
                except BaseException:
                    sock.close()
                    raise
            except OSError as e:
                self.failures += 1
                self.proxy.stats.bind_failures += 1
                level = (
                    logging.WARNING if self.failures in (1, 10) or self.failures % 100 == 0 else logging.DEBUG
                )
                log.log(
                    level,
                    "cannot listen; retrying",
                    extra={
                        "listener": str(self.key),
                        "service": self.target.service,
                        "error": e.strerror or str(e),
                        "attempt": self.failures,
                        "retry_in": round(delay, 2),
                    },
                )
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, cfg.bind_backoff_cap)
                continue
            self.bound = True
            self.proxy.stats.pending -= 1
            self.proxy.stats.bound += 1
            log.info(
                "listening",
                extra={
                    "listener": str(self.key),
                    "service": self.target.service,
                    "port": self.target.port_name,
                    "kind": self.target.kind,
                    "backends": len(self.target.backends),
                },
            )
            return

    async def close(self, abort: bool = False) -> None:
        self.proxy.unbalance(self.key)
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self.server.close()
        if abort:
            self.server.abort_all()
        if self.bound:
            self.proxy.stats.bound -= 1
            self.bound = False
            log.info("stopped listening", extra={"listener": str(self.key), "service": self.target.service})
        else:
            self.proxy.stats.pending -= 1


# --- the proxy -----------------------------------------------------------------------------------


@dataclass
class ProxyConfig:
    cluster_id: str
    node_address: str | None = "127.0.0.1"
    """Where NodePorts listen; None: no NodePort listeners."""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    udp_idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    metrics_addr: str | None = None
    sync_timeout: float | None = None
    bind_backoff_base: float = 0.5
    bind_backoff_cap: float = 30.0
    mode: Literal["userspace", "nftables"] = "userspace"
    """userspace: listen and relay; nftables: the kernel DNATs (`nftables.py`, kube-proxy's mode)."""
    check_every: float = 30.0
    """nftables mode: how often the tables are checked for still being there (rewritten if not)."""
    socket_lb: bool = True
    """userspace mode: balance this network namespace's TCP connect()s to ClusterIPs and VIPs in the
    kernel (`socketlb.py`, Cilium's socket LB) where it allows it; the listeners serve the rest."""
    kernel_splice: bool = False
    """userspace mode: hand connections that carry more than one client read to the kernel's
    sockmap splice (`splice.py`) where the kernel allows it. Off by default: it lowers a lone
    connection's latency, but under load on few cores the per-segment kernel work costs p99
    (docs/proxy.md)."""


class ProxyService:
    """One cluster's service proxy."""

    def __init__(
        self, client: AsyncClient, config: ProxyConfig, factory: SharedInformerFactory | None = None,
        dataplane: NftablesDataplane | None = None,
    ) -> None:
        """`dataplane`: the nftables mode's (default: the host's `isthmus_proxy` tables)."""
        self.config = config
        self.dataplane = (dataplane or NftablesDataplane()) if config.mode == "nftables" else None
        self._wanted: dict[ListenerKey, Target] = {}
        """nftables mode: the table the next sync applies."""
        self._synced = asyncio.Event()
        """nftables mode: set once the kernel serves the last table wanted."""
        self._kernel_task: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.stats = ProxyStats()
        self.kernel = splice.shared() if config.kernel_splice and config.mode == "userspace" else None
        self.socket_lb = open_socket_lb() if config.socket_lb and config.mode == "userspace" else None
        self._balanced: dict[ListenerKey, ListenerStats] = {}
        """Listeners whose connect()s the kernel balances, with the stats they count in."""
        self.stats.refresh = self._count_balanced
        self.factory = factory or SharedInformerFactory(client)
        self.imports: Informer[Any] = self.factory.informer(resource_for(ServiceImport))
        self.services: Informer[Service] = self.factory.informer(Service)
        self.slices: Informer[EndpointSlice] = self.factory.informer(EndpointSlice)
        self.slices.add_indexer(MCS_SLICE_INDEX, keys.mcs_keys)
        self.slices.add_indexer(KUBE_SLICE_INDEX, keys.kube_slice_keys)
        self.listeners: dict[ListenerKey, _Listener] = {}
        self.conflicts: list[str] = []
        self.health: HealthServer | None = None
        self._per_service: dict[str, list[tuple[ListenerKey, Target]]] = {}
        self._bad_affinity: dict[str, str] = {}
        """ns/name → the unknown isthmus.io/affinity value already logged for that import."""
        self._bad_distribution: dict[str, str] = {}
        """ns/name → the unknown trafficDistribution value already logged for that import."""
        self._dirty = DirtyKeys(self.flush)
        self._sync_task: asyncio.Task[bool] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._dirty.watch(self.imports, keys.own_keys)
        self._dirty.watch(self.services, keys.own_keys)
        self._dirty.watch(self.slices, keys.slice_keys)

    # ---- lifecycle -------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.stats.ready

    async def start(self) -> None:
        """Serve metrics (if asked), then sync informers and apply the table in the background."""
        if self.config.metrics_addr:
            self.health = HealthServer()
            self.health.add_readiness_check("proxy-synced", lambda: self.stats.ready)
            await self.health.start(self.config.metrics_addr)
        self._sync_task = asyncio.get_running_loop().create_task(self._run(), name="proxy informer sync")

    async def wait_ready(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """True once the informers synced and the first table was applied; False on timeout."""
        if self._sync_task is None:
            raise RuntimeError("start() first")
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self._sync_task)
        except TimeoutError:
            return False

    # ---- connect-time balancing (socketlb.py) -------------------------------------------------------

    def balance(self, key: ListenerKey, target: Target) -> None:
        """Have the kernel balance connect()s to `key`, if it can do all the listener would: TCP to a
        ClusterIP or VIP, IPv4, endpoints to pick from, no ClientIP affinity (the listener pins)."""
        lb = self.socket_lb
        if lb is None:
            return
        if (key.protocol != "TCP" or target.kind == "NodePort" or target.affinity_timeout or not target.backends
                or ":" in key.ip or any(":" in b.host for b in target.backends)):
            self.unbalance(key)
            return
        try:
            lb.serve(key.ip, key.port, tuple((b.host, b.port) for b in target.backends))
        except OSError as e:
            log.warning("connect-time balancing refused; the listener relays",
                        extra={"listener": str(key), "error": e.strerror or str(e)})
            self.unbalance(key)
            return
        stats = self.stats.for_listener(target.service, target.port_name, key.protocol, target.kind)
        old = self._balanced.get(key)
        if old is not None and old is not stats:
            self._settle_balanced(key, old)
        self._balanced[key] = stats

    def unbalance(self, key: ListenerKey) -> None:
        stats = self._balanced.pop(key, None)
        if stats is not None and self.socket_lb is not None:
            self._settle_balanced(key, stats)
            self.socket_lb.forget(key.ip, key.port)

    def _settle_balanced(self, key: ListenerKey, stats: ListenerStats) -> None:
        """The key's kernel count moves into the stats for good (its map counter starts again)."""
        assert self.socket_lb is not None
        stats.balanced_before += self.socket_lb.connections(key.ip, key.port)
        self.socket_lb.reset_count(key.ip, key.port)

    def _count_balanced(self) -> None:
        """At scrape time: the kernel's counts into the listeners' stats."""
        lb = self.socket_lb
        if lb is None:
            return
        totals: dict[ListenerStats, int] = {}
        for key, stats in self._balanced.items():
            totals[stats] = totals.get(stats, 0) + lb.connections(key.ip, key.port)
        for stats in self.stats.listeners.values():
            stats.balanced = stats.balanced_before + totals.get(stats, 0)

    async def stop(self) -> None:
        """Stop listening and drop every relayed connection and flow."""
        if self._sync_task is not None and not self._sync_task.done():
            self._sync_task.cancel()
            try:
                await self._sync_task
            except asyncio.CancelledError:
                pass
        self._dirty.armed = False
        await self.factory.stop()
        listeners, self.listeners = self.listeners, {}
        await asyncio.gather(*(lis.close(abort=True) for lis in listeners.values()))
        if self.socket_lb is not None:
            self.socket_lb.close()  # the programs detach: connect()s go where they were aimed
            self.socket_lb = None
        for task in (self._watchdog, self._kernel_task):
            while task is not None and not task.done():  # again if something swallowed the cancellation
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
        if self.dataplane is not None:
            try:
                await self.dataplane.cleanup()
            except NftablesError as e:
                log.warning("removing the nftables rules failed", extra={"error": str(e)})
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        self.stats.ready = False
        if self.health is not None:
            await self.health.stop()

    async def _run(self) -> bool:
        """Proxy ClusterIPs as soon as Services and slices are listed; VIPs follow the imports.

        ServiceImports are listed separately so a cluster without the MCS CRDs (not joined yet)
        still gets its ClusterIPs and NodePorts; "ready" waits for all three.
        """
        self.factory.start()
        started = time.monotonic()
        deadline = None if self.config.sync_timeout is None else started + self.config.sync_timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for inf in (self.services, self.slices):
            if not await inf.wait_synced(left()):
                return False
        self._dirty.add(self.services.cache.keys())
        self._dirty.armed = True
        self.flush()
        if not await self.imports.wait_synced(left()):
            log.warning("ServiceImports not listed yet (MCS CRDs missing?); proxying ClusterIPs only")
            await self.imports.wait_synced()
        self._dirty.add(self.imports.cache.keys())
        self.flush()
        if self.dataplane is not None:
            await self._synced.wait()  # ready means served: the kernel has the first table
            self._watchdog = asyncio.get_running_loop().create_task(self._watch_tables(), name="proxy nftables check")
        self.stats.ready = True
        log.info(
            "informers synced; proxying",
            extra={
                "services": len(self.services.cache),
                "imports": len(self.imports.cache),
                "slices": len(self.slices.cache),
                "listeners": len(self.listeners),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return True

    # ---- inspection (tests, status) -------------------------------------------------------------

    def is_listening(self, key: ListenerKey) -> bool:
        """Whether `key` is served: bound (userspace), or in the kernel's rules (nftables)."""
        if self.dataplane is not None:
            return key in self.dataplane.applied
        lis = self.listeners.get(key)
        return lis is not None and lis.bound

    def backends(self, key: ListenerKey) -> tuple[Backend, ...] | None:
        target = self.target(key)
        return target.backends if target is not None else None

    def target(self, key: ListenerKey) -> Target | None:
        """What `key` serves now: in the nftables mode, what the kernel was given (and its stale UDP
        flows deleted), not merely what the next sync will write."""
        if self.dataplane is not None:
            return self.dataplane.applied.get(key)
        lis = self.listeners.get(key)
        return lis.target if lis is not None else None

    # ---- events ----------------------------------------------------------------------------------

    # ---- building --------------------------------------------------------------------------------

    def build(self, key: str) -> list[tuple[ListenerKey, Target]]:
        """The listeners one `ns/name` wants, from the caches as they are now."""
        svc_obj = self.services.cache.get(key)
        imp_obj = self.imports.cache.get(key)
        svc = service_snapshot(svc_obj) if svc_obj is not None else None
        imp = import_snapshot(imp_obj) if imp_obj is not None else None
        self._check_affinity(key, imp_obj)
        if (svc is None or not svc.cluster_ips) and (imp is None or not imp.ips):
            return []
        kube = [slice_snapshot(s) for s in self.slices.cache.by_index(KUBE_SLICE_INDEX, key)]
        imported: list[SliceSnap] = []
        if imp is not None:
            # MCS slices of every source cluster; service_targets leaves out this cluster's own
            # (its endpoints come from `kube`), so nothing is counted twice.
            for s in self.slices.cache.by_index(MCS_SLICE_INDEX, key):
                imported.append(slice_snapshot(s, object_labels(s).get(SOURCE_CLUSTER_LABEL) or ""))
        return service_targets(
            svc, kube, imp, imported, cluster_id=self.config.cluster_id, node_address=self.config.node_address
        )

    def _check_affinity(self, key: str, imp_obj: Any) -> None:
        """Log an ignored isthmus.io/affinity or trafficDistribution value once per import and
        value: a service is rebuilt on every change of its slices, and the value stays."""
        self._warn_once(self._bad_affinity, key, unknown_affinity(imp_obj), "affinity",
                        "unknown isthmus.io/affinity on a ServiceImport; ignored: balancing by its "
                        "trafficDistribution, else with no preference (use local, remote or none)")
        self._warn_once(self._bad_distribution, key, unknown_import_distribution(imp_obj), "distribution",
                        "unknown trafficDistribution on a ServiceImport; balancing with no preference "
                        "(Isthmus reads PreferClose, PreferSameZone and PreferSameNode)")

    def _warn_once(self, seen: dict[str, str], key: str, raw: str | None, field: str, message: str) -> None:
        if raw is None:
            seen.pop(key, None)
        elif seen.get(key) != raw:
            seen[key] = raw
            log.warning(message, extra={"service": key, field: raw, "cluster": self.config.cluster_id})

    def flush(self) -> None:
        """Rebuild every dirty service and apply the merged table."""
        dirty = self._dirty.take()
        for key in dirty:
            try:
                targets = self.build(key)
            except Exception:
                log.exception(
                    "building the proxy table failed; keeping the previous one", extra={"service": key}
                )
                continue
            if targets:
                self._per_service[key] = targets
            else:
                self._per_service.pop(key, None)
        self.stats.rebuilds += len(dirty)
        # What is served now is held on to: a newcomer claiming a held address or listener waits.
        held = self._wanted if self.dataplane is not None else {k: lis.target for k, lis in self.listeners.items()}
        table = merge_targets(self._per_service, held)
        for c in sorted(set(table.conflicts) - set(self.conflicts)):  # once, not on every rebuild
            log.warning("listener conflict", extra={"conflict": c})
        self.conflicts = table.conflicts
        self.stats.conflicts = len(table.conflicts)
        if self.dataplane is not None:
            self._program(table.listeners)
        else:
            self._apply(table.listeners)

    def _program(self, wanted: dict[ListenerKey, Target]) -> None:
        """nftables mode: hand the table to the one task that syncs the kernel (bursts coalesce)."""
        self._wanted = wanted
        self._synced.clear()
        if self._kernel_task is None or self._kernel_task.done():
            self._kernel_task = asyncio.get_running_loop().create_task(self._sync_kernel(), name="proxy nftables")

    async def _watch_tables(self) -> None:
        """Rewrite the tables when they vanished (`nft flush ruleset`, another tool) though nothing changed."""
        assert self.dataplane is not None
        while True:
            await asyncio.sleep(self.config.check_every)
            try:
                intact = await self.dataplane.intact()
            except NftablesError as e:
                log.warning("checking the nftables rules failed", extra={"error": str(e)})
                continue
            if not intact:
                log.warning("the nftables rules are gone; writing them again")
                self._program(self._wanted)

    async def _sync_kernel(self) -> None:
        assert self.dataplane is not None
        delay = self.config.bind_backoff_base
        while not self._synced.is_set():
            wanted = self._wanted
            started = time.monotonic()
            try:
                await self.dataplane.sync(wanted)
            except (NftablesError, ValueError) as e:
                self.stats.sync_failures += 1
                log.warning("applying the nftables rules failed; retrying", extra={"error": str(e),
                                                                                 "retry_in": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.bind_backoff_cap)
                continue
            self.stats.syncs += 1
            self.stats.sync_seconds = time.monotonic() - started
            self.stats.bound = len(wanted)
            delay = self.config.bind_backoff_base
            if wanted is self._wanted:
                self._synced.set()

    def _apply(self, wanted: dict[ListenerKey, Target]) -> None:
        for key, lis in list(self.listeners.items()):
            target = wanted.get(key)
            if target is None or target.reuse_port != lis.target.reuse_port:
                del self.listeners[key]
                task = asyncio.get_running_loop().create_task(lis.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        for key, target in wanted.items():
            current = self.listeners.get(key)
            if current is None:
                self.listeners[key] = _Listener(self, key, target)
            else:
                current.retarget(target)
