"""The aggregated ServiceImport of every service, and its ClusterSet IP (VIP): decided, allocated, held.

The aggregate is derived by every agent from every cluster's view on the broker (the broker's
ExportedServices, aggregate.derive), never stored there: every reader derives the same one
(docs/discovery.md "Broker tenancy"), so no member can change what another imports, and exporters
never race to create a shared object.

The VIP (docs/discovery.md "ClusterSet IP", "VIP lifecycle") is the one decision in an aggregate
that one cluster makes for all: the oldest decision among the exporters' views stands
(aggregate.decided_ips); when there is none yet, this cluster decides, and a service that wants a
VIP gets one allocated here from this cluster's CIDR (`Aggregator.decide_vip`). The allocator
(allocator.py, pure) is kept in step with every view that holds a VIP of our CIDR: reserved while
any cluster's view holds it, released when the last one lets go (`hold`), rebuilt from the broker's
views at the start of every leadership term (`rebuild`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from isthmus.api.mcs import (
    SOURCE_CLUSTER_LABEL,
    ExportedServiceSpec,
    ServiceImport,
    broker_object_name,
)
from isthmus.discovery.aggregate import Aggregate, decided_ips, derive
from isthmus.discovery.allocator import AllocatorFull, VipAllocator
from isthmus.discovery.caches import BY_SERVICE, Caches, dump
from isthmus.discovery.endpoints import broker_service_import
from isthmus.runtime import object_labels, object_name

__all__ = ["AggregateState", "Aggregator"]

log = logging.getLogger(__name__)


@dataclass
class AggregateState:
    current: ServiceImport | None = None
    result: Aggregate | None = None
    failure: str = ""


class Aggregator:
    """Derives each service's aggregate and decides its VIP; owns this cluster's VIP allocator."""

    def __init__(self, *, cluster_id: str, cidrs: list[Any] | None) -> None:
        self.cluster_id = cluster_id
        self.allocators: dict[str, VipAllocator] = {}
        """Per family, the allocator over this cluster's block of it (at most one per family)."""
        for cidr in cidrs or ():
            allocator = VipAllocator(str(cidr))
            self.allocators.setdefault(allocator.family, allocator)
        self.allocator: VipAllocator | None = next(iter(self.allocators.values()), None)
        """The first block's allocator: what the metrics and the start-up log show."""
        self._held: dict[str, tuple[str, ...]] = {}
        """Broker ExportedService name → the VIPs it holds (ours as we publish them, others' as seen)."""
        self._holders: dict[str, set[str]] = {}
        """VIP → the ExportedServices holding it: a VIP of our CIDR is free again once none does."""

    def attach(self, caches: Caches) -> None:
        """Start a leadership term: follow the VIPs the broker's views hold."""
        self.caches = caches
        self._held, self._holders = {}, {}
        caches.b_exports.add_handler(on_add=self._observe_hold, on_update=lambda _o, n: self._observe_hold(n),
                                     on_delete=lambda o: self._observe_hold(o, gone=True))

    def rebuild(self) -> None:
        """Once the caches are synced, before allocating anything: every VIP already held from our CIDR
        (restarts, and a cluster that got a departed cluster's CIDR) is marked taken, our own views'
        included."""
        for obj in self.caches.b_exports.cache.list():
            self._observe_hold(obj, starting=True)

    # ------------------------------------------------------------------ the aggregate

    def exporters(self, ns: str, name: str, own: ExportedServiceSpec | None = None,
                  hold: bool = False) -> list[ExportedServiceSpec]:
        """Every cluster's view of the service: ours as this pass computed it (`own`; `hold`: ours as
        the broker shows it, a malformed annotation keeping it there), the others' from the broker. A
        view counts only as its cluster publishes it: labelled with the cluster named in its spec (the
        admission policy lets a member write only views labelled with its own ID), under the canonical
        name, from a registered cluster."""
        out: list[ExportedServiceSpec] = []
        caches = self.caches
        for obj in caches.b_exports.cache.by_index(BY_SERVICE, f"{ns}/{name}"):
            spec = caches.export_spec(obj)
            if (object_labels(obj).get(SOURCE_CLUSTER_LABEL) != spec.cluster
                    or object_name(obj) != broker_object_name(name, ns, spec.cluster)
                    or (spec.service_name, spec.service_namespace) != (name, ns)
                    or caches.broker_cluster(spec.cluster) is None):
                continue
            if spec.cluster != self.cluster_id or hold:
                out.append(spec)
        if own is not None:
            out.append(own)  # what we just published, whether or not the cache has it yet
        return out

    def derive(self, ns: str, name: str, own: ExportedServiceSpec | None, hold: bool) -> AggregateState:
        """The aggregated ServiceImport, as every reader derives it from the exporters' views (never
        stored on the broker: docs/discovery.md "Broker tenancy"). Empty while nobody exports the
        service, or no exporter has decided its VIP yet."""
        derived = derive(self.exporters(ns, name, own, hold))
        if derived is None:
            return AggregateState()
        obj = broker_service_import(derived.result, service=name, namespace=ns, vip_enabled=derived.vip_enabled,
                                    allocated_by=derived.allocated_by)
        obj.metadata.namespace = self.caches.broker_ns
        return AggregateState(current=obj, result=derived.result)

    # ------------------------------------------------------------------ the VIP

    def decide_vip(self, ns: str, name: str, spec: ExportedServiceSpec, before: ExportedServiceSpec | None,
                   *, headless: bool) -> tuple[ExportedServiceSpec, str]:
        """`spec` with the service's VIP as this cluster is to hold it (docs/discovery.md "ClusterSet
        IP"), and why it could not be decided ("" if it could): the oldest decision among the exporters
        (ours included, as last published: `before`), else ours now: a VIP from our CIDR when the
        service wants one, else none. An allocation failure leaves the decision open and is this
        export's failure (Ready=False Failed, retried)."""
        bname = broker_object_name(name, ns, self.cluster_id)
        mine = spec.model_copy(update={
            "clusterset_ips": before.clusterset_ips if before is not None else None,
            "clusterset_ip_allocated_by": before.clusterset_ip_allocated_by if before is not None else None})
        others = [e for e in self.exporters(ns, name) if e.cluster != self.cluster_id]
        decided = decided_ips([*others, mine])
        ips: list[str] | None = None
        allocated_by: str | None = None
        failure = ""
        if decided is not None:
            ips, allocated_by = decided
        elif headless or not spec.clusterset_ip_enabled:
            ips = []
        elif self.allocator is None:
            failure = f"cluster {self.cluster_id} has no ClusterSet IP CIDR"
        else:
            ips, failure = self._allocate(spec)
            allocated_by = self.cluster_id if ips else None
            for ip in ips or ():
                log.info("%s/%s: ClusterSet IP %s allocated", ns, name, ip)
        self.hold(bname, ips)
        return spec.model_copy(update={"clusterset_ips": ips, "clusterset_ip_allocated_by": allocated_by}), failure

    def _allocate(self, spec: ExportedServiceSpec) -> tuple[list[str] | None, str]:
        """One VIP per family of the exported Service that this cluster has a block of, in the
        Service's ipFamilies order (a dual-stack Service from a dual-stack cluster gets two); a family
        without a block here is left out (the ServiceImport offers only the families it has VIPs of,
        and the aggregate reports an exporter lacking one). A Service none of whose families has a
        block here gets one VIP of the first block, as before dual-stack: the aggregate's
        IPFamilyConflict says so. All or nothing: a full block frees what this call took."""
        families = [f for f in dict.fromkeys(spec.ip_families or ()) if f in self.allocators]
        chosen = [self.allocators[f] for f in families]
        if not chosen and self.allocator is not None:
            chosen = [self.allocator]
        ips: list[str] = []
        for allocator in chosen:
            try:
                ips.append(allocator.allocate())
            except AllocatorFull:
                for ip in ips:
                    self._release(ip)
                return None, f"no free ClusterSet IP left in {allocator.cidr}"
        return ips, ""

    def _allocator_of(self, ip: str) -> VipAllocator | None:
        return next((a for a in self.allocators.values() if a.contains(ip)), None)

    def _release(self, ip: str) -> None:
        allocator = self._allocator_of(ip)
        if allocator is not None and allocator.in_use(ip):
            allocator.release(ip)
            log.info("released ClusterSet IP %s", ip)

    def _observe_hold(self, obj: Any, *, gone: bool = False, starting: bool = False) -> None:
        """Another cluster's view (or, at start, any view) as the cache shows it: the VIP it holds.

        Our own views are booked when we publish them (`hold`), never from the cache, which may
        still show an older version of one while a newer one is being written."""
        if object_labels(obj).get(SOURCE_CLUSTER_LABEL) == self.cluster_id and not starting:
            return
        ips = None if gone else ((dump(obj).get("spec") or {}).get("clustersetIPs") or None)
        self.hold(object_name(obj), [str(ip) for ip in ips] if ips else None)

    def hold(self, holder: str, ips: Sequence[str] | None) -> None:
        """Record that broker ExportedService `holder` holds `ips` (None or empty: nothing). A VIP of our
        CIDRs is reserved while anyone holds it and freed when the last holder lets go: the VIP is freed
        only when no cluster exports the service any more, by the cluster whose CIDR holds it."""
        new = tuple(ips or ())
        old = self._held.get(holder, ())
        if old == new:
            return
        for ip in old:
            if ip in new:
                continue
            holders = self._holders.get(ip, set())
            holders.discard(holder)
            if not holders:
                self._holders.pop(ip, None)
                self._release(ip)
        if not new:
            self._held.pop(holder, None)
            return
        self._held[holder] = new
        for ip in new:
            self._holders.setdefault(ip, set()).add(holder)
            allocator = self._allocator_of(ip)
            if allocator is not None and not allocator.in_use(ip):
                allocator.reserve(ip)
