"""Informers → snapshots → the wire cache.

Any change to a ServiceImport, a Service or an EndpointSlice marks its service (`ns/name`) dirty;
dirty services are rebuilt on the next loop iteration (coalescing bursts) from what the caches
hold *now* — level-triggered, so the latest spec always wins — and swapped into the wire cache.
Until every informer has synced nothing is published and the cache answers SERVFAIL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

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
from isthmus.dns.records import (
    CLUSTER_SET_IP,
    Endpoint,
    ImportSnap,
    LocalService,
    Port,
    SliceSnap,
    service_records,
)
from isthmus.dns.wire import WireCache
from isthmus.kube import keys
from isthmus.kube.resources import resource_for
from isthmus.runtime import Informer, SharedInformerFactory, object_labels
from isthmus.runtime.dirty import DirtyKeys

__all__ = [
    "MCS_SLICE_INDEX",
    "DnsSource",
    "import_snapshot",
    "local_service_snapshot",
    "slice_snapshot",
    "unknown_affinity",
]

log = logging.getLogger(__name__)

MCS_SLICE_INDEX = "dns-mcs-service"
KUBE_SLICE_INDEX = "dns-kube-service"
CLUSTERSET_DNS_VERSION = "1.0.0"
"""MCS DNS specification schema version, answered as TXT at dns-version.<zone>."""
KUBE_DNS_VERSION = "1.1.0"
"""Kubernetes DNS specification version, for the local zone."""


# --- object → snapshot ----------------------------------------------------------------------------


def _port(name: Any, protocol: Any, port: Any) -> Port | None:
    if not isinstance(port, int):
        return None
    return Port(name or None, str(protocol or "TCP"), port)


def import_snapshot(obj: Any) -> ImportSnap:
    """A ServiceImport (lightkube generic dict) as a plain snapshot; tolerant of missing fields."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ports = tuple(
        p
        for p in (_port(d.get("name"), d.get("protocol"), d.get("port")) for d in spec.get("ports") or [])
        if p
    )
    return ImportSnap(
        namespace=obj.metadata.namespace or "",
        name=obj.metadata.name or "",
        type=str(spec.get("type") or CLUSTER_SET_IP),
        ips=tuple(str(ip) for ip in spec.get("ips") or ()),
        ports=ports,
        clusters=tuple(str(c.get("cluster")) for c in status.get("clusters") or () if c.get("cluster")),
        locality=effective_preference(obj.metadata.annotations, traffic_distribution(spec)),
    )


def unknown_affinity(obj: Any) -> str | None:
    """The isthmus.io/affinity value of a ServiceImport if it is set but not one DNS knows."""
    return affinity_value_unknown(obj.metadata.annotations if obj is not None else None)


def slice_snapshot(obj: EndpointSlice, cluster: str) -> SliceSnap:
    endpoints = []
    for ep in obj.endpoints or ():
        cond = ep.conditions
        ready = True if cond is None or cond.ready is None else bool(cond.ready)  # nil means ready (API doc)
        endpoints.append(Endpoint(tuple(ep.addresses or ()), ready, ep.hostname))
    ports = tuple(p for p in (_port(p.name, p.protocol, p.port) for p in obj.ports or ()) if p)
    return SliceSnap(cluster, tuple(endpoints), ports)


def local_service_snapshot(svc: Service, slices: Sequence[EndpointSlice], cluster: str) -> LocalService:
    spec = svc.spec
    assert svc.metadata is not None
    cluster_ip = spec.clusterIP if spec else None
    ips = tuple(spec.clusterIPs or ([cluster_ip] if cluster_ip else [])) if spec else ()
    headless = cluster_ip == "None"
    return LocalService(
        namespace=svc.metadata.namespace or "",
        name=svc.metadata.name or "",
        cluster_ips=() if headless else tuple(ip for ip in ips if ip and ip != "None"),
        headless=headless,
        ports=tuple(
            p for p in (_port(p.name, p.protocol, p.port) for p in ((spec.ports or ()) if spec else ())) if p
        ),
        publish_not_ready=bool(spec.publishNotReadyAddresses) if spec else False,
        external_name=spec.externalName if spec and spec.type == "ExternalName" else None,
        slices=tuple(slice_snapshot(s, cluster) for s in slices),
    )


# --- the source -----------------------------------------------------------------------------------


class DnsSource:
    """Keeps a WireCache in step with one cluster's ServiceImports, Services and EndpointSlices."""

    def __init__(
        self,
        factory: SharedInformerFactory,
        cache: WireCache,
        *,
        cluster_id: str,
        zones: Sequence[str],
        local_zone: str | None = None,
        cluster_names: bool = False,
    ) -> None:
        self.cache = cache
        self.factory = factory
        self.cluster_id = cluster_id
        self.zones = list(zones)
        self.local_zone = local_zone
        self.cluster_names = cluster_names
        self.imports: Informer[Any] = factory.informer(resource_for(ServiceImport))
        self.services: Informer[Service] = factory.informer(Service)
        self.slices: Informer[EndpointSlice] = factory.informer(EndpointSlice)
        self.slices.add_indexer(MCS_SLICE_INDEX, keys.mcs_keys)
        self.slices.add_indexer(KUBE_SLICE_INDEX, keys.kube_slice_keys)
        self.rebuilds = 0
        self.last_flush: float = 0.0
        self._bad_affinity: dict[str, str] = {}
        """ns/name → the unknown isthmus.io/affinity value already logged for that import."""
        self._bad_distribution: dict[str, str] = {}
        """ns/name → the unknown trafficDistribution value already logged for that import."""
        self._dirty = DirtyKeys(self.flush)
        self._dirty.watch(self.imports, keys.own_keys)
        self._dirty.watch(self.services, keys.own_keys)
        self._dirty.watch(self.slices, keys.slice_keys)

    # ---- building --------------------------------------------------------------------------------

    async def run(self, sync_timeout: float | None = None) -> bool:
        """Start the informers, wait for the initial lists, publish everything, then serve.
        Returns False if the informers did not sync within `sync_timeout` (the cache stays SERVFAIL)."""
        self.factory.start()
        started = time.monotonic()
        if not await self.factory.wait_synced(sync_timeout):
            return False
        self._dirty.add(self._all_keys())
        self.flush()
        self.cache.set_ready()
        self._dirty.armed = True
        log.info(
            "informers synced; answering",
            extra={
                "imports": len(self.imports.cache),
                "services": len(self.services.cache),
                "slices": len(self.slices.cache),
                "answers": len(self.cache),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        if self._dirty.pending:  # events that raced the first build
            self.flush()
        return True

    def _all_keys(self) -> set[str]:
        keys = set(self.imports.cache.keys()) | set(self.slices.cache.index_values(MCS_SLICE_INDEX))
        if self.local_zone:
            keys |= set(self.services.cache.keys())
        return keys

    def flush(self) -> None:
        """Rebuild every dirty service and swap its answers in."""
        dirty = self._dirty.take()
        for key in dirty:
            try:
                self.cache.replace(("svc", key), self.build(key))
            except Exception:
                log.exception(
                    "building DNS answers failed; keeping the previous ones", extra={"service": key}
                )
        self.rebuilds += len(dirty)
        self.last_flush = time.monotonic()

    def build(self, key: str) -> Any:
        """The RecordSet of one `ns/name` from the caches as they are now (None: nothing to serve)."""
        imp_obj = self.imports.cache.get(key)
        svc_obj = self.services.cache.get(key)
        imp = import_snapshot(imp_obj) if imp_obj is not None else None
        self._check_affinity(key, imp_obj)
        local: LocalService | None = None
        if svc_obj is not None and (imp is not None or self.local_zone):
            kube_slices = self.slices.cache.by_index(KUBE_SLICE_INDEX, key)
            local = local_service_snapshot(svc_obj, kube_slices, self.cluster_id)
        if imp is None and (local is None or not self.local_zone):
            return None
        slices = []
        if imp is not None:
            for s in self.slices.cache.by_index(MCS_SLICE_INDEX, key):
                cluster = object_labels(s).get(SOURCE_CLUSTER_LABEL)
                if cluster:
                    slices.append(slice_snapshot(s, cluster))
        rs = service_records(
            imp,
            slices,
            local,
            local_cluster=self.cluster_id,
            zones=self.zones,
            local_zone=self.local_zone,
            cluster_names=self.cluster_names,
        )
        return rs if rs.names or rs.rrsets else None

    def _check_affinity(self, key: str, imp_obj: Any) -> None:
        """Log an ignored isthmus.io/affinity or trafficDistribution value once per import and
        value: a service is rebuilt on every change of its slices, and the value stays."""
        self._warn_once(self._bad_affinity, key, unknown_affinity(imp_obj), "affinity",
                        "unknown isthmus.io/affinity on a ServiceImport; ignored: answering by its "
                        "trafficDistribution, else with no preference (use local, remote or none)")
        self._warn_once(self._bad_distribution, key, unknown_import_distribution(imp_obj), "distribution",
                        "unknown trafficDistribution on a ServiceImport; answering with no preference "
                        "(Isthmus reads PreferClose, PreferSameZone and PreferSameNode)")

    def _warn_once(self, seen: dict[str, str], key: str, raw: str | None, field: str, message: str) -> None:
        if raw is None:
            seen.pop(key, None)
        elif seen.get(key) != raw:
            seen[key] = raw
            log.warning(message, extra={"service": key, field: raw, "cluster": self.cluster_id})
