"""The local side of importing: the ServiceImport of each service in this cluster, and beside it a
copy of every exporting cluster's EndpointSlice (KEP-1645; docs/discovery.md "Objects in each member
cluster").

What is imported is the aggregate (aggregates.py) narrowed to the exporters that let this cluster
import it (a MultiClusterService's consumerClusters, docs/mcsvc.md). A broker slice is copied only
when it is trusted (docs/discovery.md "What an agent imports (trust and liveness)"): anyone holding
a broker credential can write slices there, so a slice counts only as its source cluster publishes
it, and a silent cluster's (heartbeat.py) are withdrawn until it beats again. Namespaces are never
created here: a service is imported where its namespace exists and is not being deleted.

Each imported slice is cached twice, on the broker and as its local copy: the caches' transforms
here let one endpoints list serve both.

A cluster's slice copy lists only the ServiceImport ports its own Service exposes as the import
does (aggregate.served_ports): traffic to a conflicting port reaches only the clusters that expose
it (KEP-1645 "Service Port"). The import's `Ready` condition (docs/discovery.md "ServiceImport
conditions") is written last, once this pass has put the slices in place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType
from prometheus_client import Counter

from isthmus.api.base import Condition, find_condition, merge_conditions, new_condition
from isthmus.api.mcs import (
    AGENT_FIELD_MANAGER,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    USE_CLUSTERSET_IP_ANNOTATION,
    ExportedServiceSpec,
    ImportConditionType,
    ImportReadyReason,
    ServiceImport,
    ServiceImportStatus,
    broker_object_name,
)
from isthmus.discovery.caches import BY_SERVICE, Caches, dump, slice_body
from isthmus.discovery.endpoints import (
    imported_slice_name,
    local_import_metadata,
    local_service_import,
    local_slice_copy,
)
from isthmus.kube import helpers
from isthmus.runtime import REGISTRY, object_labels, object_name, object_namespace

__all__ = ["CLUSTER_FAMILIES", "IGNORED_SLICES", "ImportSyncer", "ready_condition"]

log = logging.getLogger(__name__)

IGNORED_SLICES = Counter(
    "isthmus_agent_ignored_slices_total",
    "Broker EndpointSlices not imported, by reason (unregistered source cluster, source not listed in the "
    "aggregate, wrong name or owner, silent cluster).",
    ["reason"], registry=REGISTRY,
)


CLUSTER_FAMILIES: frozenset[str] = frozenset({"IPv4"})
"""The IP families an Isthmus member serves an import over: its Services' and ClusterSet IP CIDRs'
(IPv4 only today)."""

ServedPorts = Mapping[str, frozenset[tuple[str, str]]]
"""Per exporting cluster, the (name, protocol) of the import's ports it serves (Aggregate.served)."""


def ready_condition(imp: ServiceImport, *, families: frozenset[str], waiting_for: list[str],
                    generation: int | None) -> Condition:
    """The ServiceImport's Ready condition (mcs-api v1beta1; docs/discovery.md "ServiceImport conditions").

    False IPFamilyNotSupported when none of the import's families is one this cluster serves;
    otherwise False Pending while something is not in place yet (`waiting_for`, what, for the
    message, and the ClusterSet IP the import is to have), True Ready when all is."""
    wanted = list(imp.spec.ip_families or [])
    if wanted and not any(f in families for f in wanted):
        return new_condition(ImportConditionType.READY, False, ImportReadyReason.IP_FAMILY_NOT_SUPPORTED,
                             f"the service is exported as {', '.join(wanted)} but this cluster serves "
                             f"{', '.join(sorted(families))} only", generation)
    waiting = list(waiting_for)
    if (imp.metadata.annotations or {}).get(USE_CLUSTERSET_IP_ANNOTATION) == "true" and not imp.spec.ips:
        waiting.insert(0, "the ClusterSet IP")
    if waiting:
        return new_condition(ImportConditionType.READY, False, ImportReadyReason.PENDING,
                             f"waiting for {'; '.join(waiting)}", generation)
    clusters = len(imp.status.clusters)
    return new_condition(ImportConditionType.READY, True, ImportReadyReason.READY,
                         f"the service is imported from {clusters} cluster{'s' if clusters != 1 else ''}",
                         generation)


class ImportSyncer:
    """This cluster's ServiceImports and their EndpointSlices, from the aggregates and broker slices."""

    def __init__(self, *, cluster: AsyncClient, cluster_id: str, silent: Callable[[], frozenset[str]],
                 families: frozenset[str] = CLUSTER_FAMILIES) -> None:
        self.cluster = cluster
        self.cluster_id = cluster_id
        self.silent = silent
        """The peers whose endpoints are withheld now (heartbeat.py's verdict)."""
        self.families = families
        """The IP families this cluster serves (ServiceImport Ready=False IPFamilyNotSupported without one)."""
        self._ignored_logged: set[tuple[str, str]] = set()

    def attach(self, caches: Caches) -> None:
        """Start a leadership term over `caches`."""
        self.caches = caches
        # Each imported slice is cached twice, on the broker and as its local copy (30,000 pairs at
        # 10,000 services x 3 clusters): whichever arrives second takes the first's equal endpoints.
        caches.slices.set_transform(self._share_with_broker_slice)
        caches.b_slices.set_transform(self._share_with_local_copy)

    def _share_with_broker_slice(self, obj: Any) -> None:
        """Transform of local slices: an MCS copy takes its broker slice's equal lists."""
        labels = obj.metadata.labels or {}
        service, cluster = labels.get(SERVICE_NAME_LABEL), labels.get(SOURCE_CLUSTER_LABEL)
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE or not service or not cluster:
            return
        name = broker_object_name(service, obj.metadata.namespace or "", cluster)
        if (broker := self.caches.b_slices.cache.get(f"{self.caches.broker_ns}/{name}")) is not None:
            _share_lists(obj, broker)

    def _share_with_local_copy(self, obj: Any) -> None:
        """Transform of broker slices: one takes its local copy's equal lists."""
        labels = obj.metadata.labels or {}
        service, ns, cluster = (labels.get(SERVICE_NAME_LABEL), labels.get(SOURCE_NAMESPACE_LABEL),
                                labels.get(SOURCE_CLUSTER_LABEL))
        if not service or not ns or not cluster:
            return
        if (local := self.caches.slices.cache.get(f"{ns}/{imported_slice_name(service, cluster)}")) is not None:
            _share_lists(obj, local)

    def sources_for_us(self, ns: str, name: str, own: ExportedServiceSpec | None) -> set[str]:
        """The exporting clusters whose export this cluster may import: those without a consumer list
        and those whose list names us (a MultiClusterService's consumerClusters, docs/mcsvc.md). `own`:
        this cluster's view as this pass published it."""
        consumers: dict[str, list[str] | None] = {}
        for o in self.caches.b_exports.cache.by_index(BY_SERVICE, f"{ns}/{name}"):
            spec = self.caches.export_spec(o)
            consumers[spec.cluster] = spec.consumer_clusters
        if own is not None:
            consumers[self.cluster_id] = own.consumer_clusters
        return {c for c, allowed in consumers.items() if allowed is None or self.cluster_id in allowed}

    async def sync(self, ns: str, name: str, agg: ServiceImport | None, sources: set[str] | None = None,
                   served: ServedPorts | None = None) -> None:
        """`served`: the aggregate's per-cluster ports (None: every slice port is kept)."""
        ns_obj = self.caches.namespaces.cache.get(ns)
        if ns_obj is None:
            return  # creating namespaces is not the agent's job; the Namespace watch brings us back
        if _terminating(ns_obj):
            return  # kube refuses new objects there; the Namespace watch brings us back if it returns
        hidden: set[str] = set()
        if agg is not None and sources is not None:
            allowed = [c for c in agg.status.clusters if c.cluster in sources]
            hidden = {c.cluster for c in agg.status.clusters} - sources
            if not allowed:
                agg = None  # no exporter lets this cluster import the service: no import here
            elif hidden:
                agg = agg.model_copy(deep=True)
                agg.status.clusters = allowed
        try:
            await self._sync_in(ns, name, agg, hidden, served)
        except ApiError as e:
            if not helpers.is_namespace_terminating(e):
                raise
            # Deleted between our cache read and the write: expected, and the namespace's deletion
            # removes what we made there.
            log.debug("%s/%s: namespace is being deleted; not importing", ns, name)

    def _importable(self, b: Any, ns: str, name: str, agg: ServiceImport) -> str | None:
        """Why a broker slice must not be imported (None: import it).

        Anyone holding a broker credential can write slices there, so a slice is trusted only when it
        is the one its source cluster publishes: a registered `Cluster`, listed in the aggregate, under
        the canonical name, owned by that `Cluster`. Silent clusters' slices are withdrawn.
        """
        cluster = object_labels(b).get(SOURCE_CLUSTER_LABEL) or ""
        registered = self.caches.broker_cluster(cluster) if cluster else None
        if registered is None:
            return "unregistered-cluster"
        if cluster not in {c.cluster for c in agg.status.clusters}:
            return "not-in-aggregate"
        if object_name(b) != broker_object_name(name, ns, cluster) or _uid(registered) not in _owner_uids(b):
            return "not-canonical"
        if cluster in self.silent():
            return "silent-cluster"
        return None

    def _note_ignored(self, b: Any, reason: str) -> None:
        if reason != "silent-cluster":  # withdrawn, not suspicious: logged once per cluster elsewhere
            IGNORED_SLICES.labels(reason).inc()
            seen = (f"{object_name(b)}@{dump(b).get('metadata', {}).get('resourceVersion')}", reason)
            if seen not in self._ignored_logged:
                if len(self._ignored_logged) > 10_000:
                    self._ignored_logged.clear()
                self._ignored_logged.add(seen)
                log.warning("not importing broker EndpointSlice %s (source cluster %r): %s", object_name(b),
                            object_labels(b).get(SOURCE_CLUSTER_LABEL), _IGNORED_WHY[reason])

    async def _sync_in(self, ns: str, name: str, agg: ServiceImport | None, hidden: set[str] | None = None,
                       served: ServedPorts | None = None) -> None:
        caches = self.caches
        local_raw = caches.imports.cache.get(f"{ns}/{name}")
        local = ServiceImport.from_dict(local_raw) if local_raw is not None else None
        copies = {object_name(o): o for o in caches.slices.cache.by_index(BY_SERVICE, f"{ns}/{name}")
                  if object_labels(o).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE and object_namespace(o) == ns}
        if agg is None:
            for slice_name in copies:
                await helpers.ensure_deleted(self.cluster, EndpointSlice, slice_name, namespace=ns)
            if local is not None:
                await helpers.ensure_deleted(self.cluster, ServiceImport, name, namespace=ns)
            return
        labels, annotations = local_import_metadata(agg)
        if local is None:
            local = await _write(self.cluster, local_service_import(agg, namespace=ns, service=name), replace=False)
        elif (local.spec != agg.spec or (local.metadata.labels or None) != labels
              or (local.metadata.annotations or None) != annotations):
            desired = local_service_import(agg, namespace=ns, service=name)
            desired.metadata.resource_version = local.metadata.resource_version
            local = await _write(self.cluster, desired, replace=True)
        uid = local.metadata.uid or ""
        wanted: set[str] = set()
        in_place: set[str] = set()
        for b in caches.b_slices.cache.by_index(BY_SERVICE, f"{ns}/{name}"):
            # Our own slice too: every cluster that imports a service, the exporter included, has MCS
            # EndpointSlices for it (KEP-1645); dns and the proxy read their own cluster from kube's.
            cluster = object_labels(b).get(SOURCE_CLUSTER_LABEL) or ""
            if hidden and cluster in hidden:
                continue  # its export names consumers, and this cluster is not one of them
            why = self._importable(b, ns, name, agg)
            if why is not None:
                self._note_ignored(b, why)
                continue
            copy_name = imported_slice_name(name, cluster)
            wanted.add(copy_name)
            in_place.add(cluster)
            existing = copies.get(copy_name)
            ports = _served_slice_ports(b, served.get(cluster) if served is not None else None)
            if existing is not None and _copy_current(existing, b, uid, name, cluster, ports):
                continue
            copy = local_slice_copy(b, ns, name, cluster, uid, name, ports=ports)
            if existing is None or slice_body(existing) != slice_body(copy) or _owner_uids(existing) != {uid}:
                await helpers.apply_quiet(self.cluster, copy, field_manager=AGENT_FIELD_MANAGER, force=True)
        for slice_name in copies.keys() - wanted:
            await helpers.ensure_deleted(self.cluster, EndpointSlice, slice_name, namespace=ns)
        await self._sync_status(local, agg, in_place)

    async def _sync_status(self, local: ServiceImport, agg: ServiceImport, in_place: set[str]) -> None:
        """status.clusters from the aggregate, Ready as this pass left the import, endpointSliceObjects.

        A silent cluster's slices are withdrawn on purpose (heartbeat.py): not something to wait for."""
        silent = self.silent()
        missing = sorted(c.cluster for c in agg.status.clusters if c.cluster not in in_place and c.cluster not in silent)
        waiting = [f"the EndpointSlices of cluster{'s' if len(missing) > 1 else ''} {', '.join(missing)}"] if missing else []
        # The aggregate: the spec and annotations just written, status.clusters as they are to be.
        ready = ready_condition(agg, families=self.families, waiting_for=waiting, generation=local.metadata.generation)
        old = find_condition(local.status.conditions, ImportConditionType.READY)
        if (local.status.clusters == agg.status.clusters and local.status.endpoint_slice_objects == "Present"
                and old is not None and (old.status, old.reason, old.message, old.observed_generation)
                == (ready.status, ready.reason, ready.message, ready.observed_generation)):
            return  # the usual pass: nothing to write, and no condition list copied to find it out
        conditions = merge_conditions(local.status.conditions, [ready])
        local.status = ServiceImportStatus(clusters=agg.status.clusters, conditions=conditions,
                                           endpoint_slice_objects="Present")
        await helpers.patch_status_quiet(self.cluster, local, field_manager=AGENT_FIELD_MANAGER,
                                         patch_type=PatchType.MERGE)


async def _write(client: AsyncClient, obj: ServiceImport, *, replace: bool) -> ServiceImport:
    """Create or replace (with the object's resourceVersion) one of our models; returns what is stored."""
    write = helpers.replace if replace else helpers.create
    return await write(client, obj, field_manager=AGENT_FIELD_MANAGER)


def _share_lists(obj: Any, cached: Any) -> None:
    """`obj`, about to be cached, takes `cached`'s endpoints and ports where they are equal:
    cached objects are read-only, so one instance may serve both."""
    if obj.endpoints and obj.endpoints is not cached.endpoints and obj.endpoints == cached.endpoints:
        obj.endpoints = cached.endpoints
    if obj.ports and obj.ports is not cached.ports and obj.ports == cached.ports:
        obj.ports = cached.ports


def _served_slice_ports(broker: Any, served: frozenset[tuple[str, str]] | None) -> list[Any] | None:
    """A broker slice's ports narrowed to those its cluster serves as the import does (None: all,
    the broker slice's own list, shared with its cached copy)."""
    if served is None:
        return None
    ports = list(broker.ports or [])
    kept = [p for p in ports if (p.name or "", p.protocol or "TCP") in served]
    return None if len(kept) == len(ports) else kept


def _copy_current(existing: Any, broker: Any, uid: str, service: str, cluster: str,
                  ports: list[Any] | None = None) -> bool:
    """A cheap check that a local slice copy already matches its broker slice (owner, labels and
    body; `ports` when narrowed), on the cached structs without building the copy: true only when
    the full comparison (slice_body of `local_slice_copy`) would find nothing to write either."""
    meta = existing.metadata
    refs = meta.ownerReferences or []
    return (len(refs) == 1 and refs[0].uid == uid and existing.endpoints == broker.endpoints
            and (existing.ports or []) == ((broker.ports if ports is None else ports) or [])
            and existing.addressType == (broker.addressType or "IPv4")
            and meta.labels == {SERVICE_NAME_LABEL: service, SOURCE_CLUSTER_LABEL: cluster,
                                MANAGED_BY_LABEL: MANAGED_BY_VALUE})


_IGNORED_WHY = {
    "unregistered-cluster": "no such Cluster is registered on the broker",
    "not-in-aggregate": "the cluster is not listed in the aggregated ServiceImport's status.clusters",
    "not-canonical": "its name or owner is not the one its cluster publishes",
}


def _uid(obj: Any) -> str:
    return str((dump(obj).get("metadata") or {}).get("uid") or "")


def _terminating(ns_obj: Any) -> bool:
    d = dump(ns_obj)
    return bool((d.get("metadata") or {}).get("deletionTimestamp")) or (d.get("status") or {}).get("phase") == "Terminating"


def _owner_uids(obj: Any) -> set[str]:
    return {r.get("uid", "") for r in (dump(obj).get("metadata") or {}).get("ownerReferences") or []}
