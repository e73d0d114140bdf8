"""The member side of exposure, `isthmus mcsvc`: one per member cluster, leader-elected.

Pull model, as the rest of Isthmus: it reads MultiClusterServices from the broker and acts only in
its own cluster (docs/mcsvc.md). Keyed by `<namespace>/<name>` of the MultiClusterService; a
reconcile reads everything from caches and converges:

- in a provider cluster: the Service's check (it exists; every `spec.ports` entry is one of its
  ports), then for CrossCluster a ServiceExport labelled as made by the MultiClusterService (a
  user's own ServiceExport is left alone) carrying discovery's exported-ports and consumer-clusters
  annotations and the affinity as an exported annotation; for LoadBalancer the Service's ready
  endpoints collected into an EndpointSlice on the broker (the load balancer's backends);
- anywhere else: removal of what a previous reconcile made here (a removed type, a cluster no
  longer a provider, the object deleted);
- this cluster's report: a MultiClusterServiceReport of its own in the broker namespace, the only
  exposure object it writes there besides its collected slices (the broker controller alone writes
  the object's status: it copies the reports into `status.clusters` and summarises them).

Providers left to default are the clusters that have the Service (docs/mcsvc.md "Providers"): a
cluster without it reports itself as no provider, which is not a failure.

Built on `runtime.Manager`: the Lease (in this cluster), each term's informers of both clusters
(this cluster's synced first, then the broker's), readiness and the Lease handed back on stop.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta as KubeObjectMeta
from lightkube.models.meta_v1 import OwnerReference as KubeOwnerReference
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.base import ObjectMeta, OwnerReference
from isthmus.api.mcs import (
    AFFINITY_ANNOTATION,
    AGENT_NAMESPACE,
    CONSUMER_CLUSTERS_ANNOTATION,
    EXPORTED_PORTS_ANNOTATION,
    ISTHMUS_GROUP,
    ISTHMUS_VERSION,
    SERVICE_DISCOVERY_NAME,
    SOURCE_CLUSTER_LABEL,
    USE_CLUSTERSET_IP_ANNOTATION,
    Cluster,
    ServiceDiscovery,
    ServiceExport,
    ServiceExportSpec,
    ServiceImport,
)
from isthmus.api.mcsvc import (
    CONTROLLER_NAMESPACE,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MCS_LABEL,
    MCS_NAMESPACE_LABEL,
    MEMBER_FIELD_MANAGER,
    MEMBER_LEASE,
    PERMANENT_ID_LABEL,
    SERVICE_PORTS_ANNOTATION,
    SLICE_MANAGED_BY_LABEL,
    SLICE_MANAGED_BY_VALUE,
    ClusterReport,
    EventReason,
    ExportOwner,
    ExposureType,
    MultiClusterService,
    MultiClusterServiceRef,
    MultiClusterServiceReport,
    MultiClusterServiceReportSpec,
    collected_slice_name,
    format_service_ports,
    named_consumers,
    named_providers,
    port_selector,
    report_name,
    resolve,
)
from isthmus.exposure.plan import exposed_ports, made_for, missing_ports
from isthmus.kube import helpers, keys
from isthmus.kube.endpointslices import endpoint_ready, own_slices, pod_endpoints
from isthmus.kube.resources import resource_for
from isthmus.runtime import (
    Controller,
    EventRecorder,
    LeaderElection,
    Manager,
    Result,
    Term,
    object_labels,
    object_name,
)

log = logging.getLogger(__name__)

MCSResource: Any = resource_for(MultiClusterService)
ReportResource: Any = resource_for(MultiClusterServiceReport)
RETRY_SECONDS = 5.0
JOINED_CHECK = 2.0


def _key(obj: Any) -> list[str]:
    return list(keys.own_keys(obj))


class MemberController:
    """`isthmus mcsvc` for one member cluster. `run()` until cancelled."""

    def __init__(
        self,
        *,
        cluster: AsyncClient,
        broker: AsyncClient,
        cluster_id: str,
        broker_namespace: str,
        identity: str,
        workers: int = 4,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.cluster = cluster
        self.broker = broker
        self.cluster_id = cluster_id
        self.broker_ns = broker_namespace
        self.workers = workers
        self.recorder = EventRecorder(broker, f"{MEMBER_FIELD_MANAGER}/{cluster_id}", instance=identity)
        self.manager = Manager(f"mcsvc-{cluster_id}", election=LeaderElection(
            cluster, MEMBER_LEASE, CONTROLLER_NAMESPACE, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period))
        self.manager.setup(self._wire)
        self.manager.on_exit(self.recorder.aclose)
        self.field_manager = f"{MEMBER_FIELD_MANAGER}-{cluster_id}"
        self.controller: Controller | None = None
        self._joined_at: tuple[bool, float] = (True, -JOINED_CHECK)
        self._written: dict[str, dict[str, Any] | None] = {}
        """Report name → the report spec this controller last wrote (None: deleted), while the cache has
        not shown it yet; forgotten on the report's next watch event."""
        self._reported: dict[str, tuple[str, str]] = {}
        """key → (reason, message) of the last failure event, so one problem is one Event."""

    @property
    def ready(self) -> bool:
        """Leading, both clusters' caches synced."""
        return self.manager.ready

    async def run(self) -> None:
        await self.manager.run()

    def _wire(self, term: Term) -> None:
        self.services = term.informer(self.cluster, Service)
        self.exports = term.informer(self.cluster, resource_for(ServiceExport))
        self.imports = term.informer(self.cluster, resource_for(ServiceImport))
        self.namespaces = term.informer(self.cluster, Namespace)
        self.slices = term.informer(self.cluster, EndpointSlice)
        self.slices.add_indexer("kube-service", keys.kube_slice_keys)
        self.mcs = term.informer(self.broker, MCSResource)
        self.clusters = term.informer(self.broker, resource_for(Cluster), self.broker_ns)
        self.collected = term.informer(self.broker, EndpointSlice, self.broker_ns, labels={
            SLICE_MANAGED_BY_LABEL: SLICE_MANAGED_BY_VALUE, SOURCE_CLUSTER_LABEL: self.cluster_id})
        self.reports = term.informer(self.broker, ReportResource, self.broker_ns,
                                     labels={SOURCE_CLUSTER_LABEL: self.cluster_id})
        c = Controller(f"mcsvc-{self.cluster_id}", self.reconcile, workers=self.workers, qps=500.0, burst=5000)
        # The status is the broker controller's: only spec and metadata concern this cluster.
        c.watch(self.mcs, _key, predicate=_not_status_only)
        self._written = {}
        # Our report changed or went (anyone's write, ours included): re-assert it if it is not ours.
        self.reports.add_handler(on_add=self._forget, on_update=lambda _o, n: self._forget(n), on_delete=self._forget)
        c.watch(self.reports, made_for)
        c.watch(self.services, _key)
        c.watch(self.exports, _key, predicate=_not_status_only)
        c.watch(self.imports, _key)
        c.watch(self.namespaces, lambda o: [k for k in self._all_keys() if keys.service_of(k)[0] == object_name(o)])
        c.watch(self.slices, lambda o: list(keys.kube_slice_keys(o)))
        c.watch(self.collected, made_for)
        # Joins and leaves change who provides and consumes (heartbeats are annotations only).
        c.watch(self.clusters, lambda _o: self._all_keys(),
                predicate=lambda old, new: old is None or object_name(old) != object_name(new))
        self.controller = c
        term.add(c)
        term.on_synced(self._synced)
        term.on_stopped(self._stopped)

    async def _synced(self) -> None:
        assert self.controller is not None
        for key in self._orphan_keys():  # objects whose MultiClusterService went while we were down
            self.controller.enqueue(key)
        log.info("mcsvc controller of cluster %s leading", self.cluster_id)

    async def _stopped(self) -> None:
        self.controller = None

    def _forget(self, obj: Any) -> None:
        self._written.pop(object_name(obj), None)

    def _all_keys(self) -> list[str]:
        return sorted({k for o in self.mcs.cache.list() for k in _key(o)})

    def _orphan_keys(self) -> list[str]:
        found = {k for o in self.collected.cache.list() for k in made_for(o)}
        found |= {k for o in self.reports.cache.list() for k in made_for(o)}
        found |= {k for o in self.exports.cache.list()
                  if object_labels(o).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE for k in _key(o)}
        return sorted(found)

    # ------------------------------------------------------------------ reconcile

    async def _joined(self) -> bool:
        """Whether this cluster is still a member (`isthmus leave` deletes the ServiceDiscovery, then
        revokes the broker token): after a leave nothing may be made again from a stale cache. Read
        at most every JOINED_CHECK seconds."""
        now = time.monotonic()
        if now - self._joined_at[1] >= JOINED_CHECK:
            sd = await helpers.get_or_none(self.cluster, ServiceDiscovery, SERVICE_DISCOVERY_NAME,
                                           namespace=AGENT_NAMESPACE)
            self._joined_at = (sd is not None and sd.spec.cluster_id == self.cluster_id, now)
        return self._joined_at[0]

    async def reconcile(self, key: str) -> Result | None:
        ns, name = keys.service_of(key)
        if not await self._joined():
            return None
        raw = self.mcs.cache.get(key)
        mcs = MultiClusterService.from_dict(raw) if raw is not None else None
        if mcs is None or mcs.deleting:
            await self._remove_export(ns, name)
            await self._remove_collected(ns, name)
            await self._write_report(ns, name, mcs, None)
            self._reported.pop(key, None)
            return None
        known = [object_name(o) for o in self.clusters.cache.list()]
        consumers, _ = resolve(named_consumers(mcs), known)
        if named_providers(mcs):
            provider = self.cluster_id in resolve(named_providers(mcs), known)[0]
        else:
            # Left to default: the clusters that have the Service (docs/mcsvc.md "Providers").
            provider = self.services.cache.get(key) is not None
        report = ClusterReport(name=self.cluster_id, provider=provider,
                               consumer=self.cluster_id in consumers and mcs.has_type(ExposureType.CROSS_CLUSTER),
                               observed_generation=mcs.metadata.generation)
        retry = False
        if report.provider:
            retry = await self._provide(mcs, report, consumers if named_consumers(mcs) else None)
        else:
            await self._remove_export(ns, name)
            await self._remove_collected(ns, name)
            if not named_providers(mcs):
                report.reason = "NoService"
                report.message = (f"no Service {ns}/{name} in cluster {self.cluster_id}: not a provider "
                                  "(providers left to default are the clusters that have the Service)")
        if report.consumer:
            report.imported = self.imports.cache.get(key) is not None
            if not report.imported and self.namespaces.cache.get(ns) is None:
                # Discovery imports only where the namespace exists (KEP-1645's namespace sameness).
                report.reason = "NamespaceNotFound"
                report.message = (f"namespace {ns} does not exist in cluster {self.cluster_id}: create it there "
                                  "to import the service")
        await self._write_report(ns, name, mcs, report)
        return Result(requeue_after=RETRY_SECONDS) if retry else None

    async def _provide(self, mcs: MultiClusterService, report: ClusterReport, consumers: list[str] | None) -> bool:
        """The provider's part; fills `report`. Returns whether to look again (a failure)."""
        ns, name = mcs.namespace or "", mcs.name
        key = f"{ns}/{name}"
        raw = self.services.cache.get(key)
        service: Service | None = raw
        cross = mcs.has_type(ExposureType.CROSS_CLUSTER)
        lb = mcs.has_type(ExposureType.LOAD_BALANCER)
        if service is None:
            report.service_applied, report.reason = False, "ServiceNotFound"
            report.message = (f"Service {ns}/{name} does not exist in cluster {self.cluster_id}; retrying: "
                              "the service is exposed from this cluster as soon as it appears")
            self._warn(mcs, EventReason.SYNC_SERVICE_FAILED, report.message)
            # Karmada accepts and retries: what CrossCluster made stays (the export waits for the
            # Service, as MCS allows); the load balancer has no endpoints from here meanwhile.
            if cross:
                await self._ensure_export(mcs, report, consumers)
            else:
                await self._remove_export(ns, name)
            await self._remove_collected(ns, name)
            return True
        missing = missing_ports(mcs.spec.ports, service)
        if missing:
            report.service_applied, report.reason = False, "PortNotFound"
            report.message = (f"Service {ns}/{name} in cluster {self.cluster_id} has no port {', '.join(missing)} "
                              f"(its ports: {_describe_ports(service)}); nothing changed in this cluster: fix "
                              "spec.ports or the Service")
            self._warn(mcs, EventReason.SYNC_SERVICE_FAILED, report.message)
            return True
        report.service_applied, report.reason = True, EventReason.SYNC_SERVICE_SUCCEED.value
        report.message = f"Service {ns}/{name} is exposed from cluster {self.cluster_id}"
        own = own_slices(name, self.slices.cache.by_index("kube-service", key))
        report.ready_endpoints = sum(1 for s in own for ep in s.endpoints or [] if endpoint_ready(ep.conditions)
                                     for _ in ep.addresses or [])
        if self._reported.pop(key, None) is not None:
            self.recorder.normal(self._mcs_raw(mcs), EventReason.SYNC_SERVICE_SUCCEED,
                                 f"cluster {self.cluster_id}: {report.message}")
        if cross:
            await self._ensure_export(mcs, report, consumers)
        else:
            await self._remove_export(ns, name)
        if lb:
            await self._ensure_collected(mcs, service, own)
        else:
            await self._remove_collected(ns, name)
        return False

    def _mcs_raw(self, mcs: MultiClusterService) -> Any:
        return self.mcs.cache.get(f"{mcs.namespace}/{mcs.name}") or mcs

    def _warn(self, mcs: MultiClusterService, reason: EventReason, message: str) -> None:
        key = f"{mcs.namespace}/{mcs.name}"
        if self._reported.get(key) == (reason.value, message):
            return
        self._reported[key] = (reason.value, message)
        self.recorder.warning(self._mcs_raw(mcs), reason, f"cluster {self.cluster_id}: {message}")

    # -- CrossCluster: the ServiceExport

    def _desired_export(self, mcs: MultiClusterService, consumers: list[str] | None) -> ServiceExport:
        annotations: dict[str, str] = {}
        selector = port_selector(mcs.spec.ports)
        if selector is not None:
            annotations[EXPORTED_PORTS_ANNOTATION] = selector
        if consumers is not None:
            annotations[CONSUMER_CLUSTERS_ANNOTATION] = ",".join(consumers)
        vip = (mcs.metadata.annotations or {}).get(USE_CLUSTERSET_IP_ANNOTATION)
        if vip is not None:  # Lighthouse's per-export VIP choice, given once on the MultiClusterService
            annotations[USE_CLUSTERSET_IP_ANNOTATION] = vip
        affinity = (mcs.metadata.annotations or {}).get(AFFINITY_ANNOTATION)
        labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, MCS_LABEL: mcs.name}
        if mcs.permanent_id:
            labels[PERMANENT_ID_LABEL] = mcs.permanent_id
        return ServiceExport(
            metadata=ObjectMeta(name=mcs.name, namespace=mcs.namespace, labels=labels,
                                annotations=annotations or None),
            spec=ServiceExportSpec(exported_annotations={AFFINITY_ANNOTATION: affinity} if affinity else None),
        )

    async def _ensure_export(self, mcs: MultiClusterService, report: ClusterReport,
                             consumers: list[str] | None) -> None:
        key = f"{mcs.namespace}/{mcs.name}"
        raw = self.exports.cache.get(key)
        if raw is not None and object_labels(raw).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            report.export = ExportOwner.USER.value
            if self._reported.get(key + "#user") is None:
                self._reported[key + "#user"] = ("", "")
                self.recorder.normal(
                    self._mcs_raw(mcs), EventReason.EXPORT_OWNED_BY_USER,
                    f"cluster {self.cluster_id}: a ServiceExport {key} made by a user exists; it is used as it "
                    "is and never changed or deleted, so spec.ports and the consumer list do not narrow this "
                    "cluster's export")
            return
        report.export = ExportOwner.MCS.value
        desired = self._desired_export(mcs, consumers)
        if raw is not None:
            current = ServiceExport.from_dict(raw)
            ours = {k: v for k, v in (current.metadata.annotations or {}).items()
                    if k in (EXPORTED_PORTS_ANNOTATION, CONSUMER_CLUSTERS_ANNOTATION, USE_CLUSTERSET_IP_ANNOTATION)}
            if ((current.metadata.labels or {}) == desired.metadata.labels
                    and ours == (desired.metadata.annotations or {})
                    and current.spec.exported_annotations == desired.spec.exported_annotations):
                return
        try:
            await helpers.apply(self.cluster, desired, field_manager=MEMBER_FIELD_MANAGER, force=True)
        except ApiError as e:
            if helpers.is_not_found(e):  # the namespace does not exist here (yet)
                report.service_applied, report.reason = False, "NamespaceNotFound"
                report.message = f"namespace {mcs.namespace} does not exist in cluster {self.cluster_id}"
                report.export = None
                return
            raise

    async def _remove_export(self, ns: str, name: str) -> None:
        raw = self.exports.cache.get(f"{ns}/{name}")
        if raw is None or object_labels(raw).get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            return  # nothing of ours (a user's export is never deleted)
        if object_labels(raw).get(MCS_LABEL) != name:
            return
        await helpers.ensure_deleted(self.cluster, ServiceExport, name, namespace=ns)

    # -- LoadBalancer: the collected EndpointSlice on the broker

    def _cluster_owner(self) -> KubeOwnerReference | None:
        obj = self.clusters.cache.get(f"{self.broker_ns}/{self.cluster_id}")
        uid = cast(Any, obj).to_dict().get("metadata", {}).get("uid") if obj is not None else None
        if not uid:
            return None
        return KubeOwnerReference(apiVersion=f"{ISTHMUS_GROUP}/{ISTHMUS_VERSION}", kind="Cluster",
                                  name=self.cluster_id, uid=uid, blockOwnerDeletion=False)

    async def _ensure_collected(self, mcs: MultiClusterService, service: Service, own: list[EndpointSlice]) -> None:
        ns, name = mcs.namespace or "", mcs.name
        endpoints, ports = pod_endpoints(own)
        exposed = exposed_ports(mcs.spec.ports, service)
        names = {p[0] for p in exposed}
        owner = self._cluster_owner()
        slice_name = collected_slice_name(ns, name, self.cluster_id)
        desired = EndpointSlice(
            metadata=KubeObjectMeta(
                name=slice_name, namespace=self.broker_ns,
                labels={SLICE_MANAGED_BY_LABEL: SLICE_MANAGED_BY_VALUE, SOURCE_CLUSTER_LABEL: self.cluster_id,
                        MCS_LABEL: name, MCS_NAMESPACE_LABEL: ns},
                annotations={SERVICE_PORTS_ANNOTATION: format_service_ports(exposed)},
                ownerReferences=[owner] if owner is not None else None,
            ),
            addressType="IPv4",
            endpoints=endpoints,
            ports=[p for p in ports if (p.name or "") in names],
        )
        current = self.collected.cache.get(f"{self.broker_ns}/{slice_name}")
        if current is not None and _slice_body(current) == _slice_body(desired):
            return
        await helpers.apply(self.broker, desired, field_manager=MEMBER_FIELD_MANAGER, force=True)

    async def _remove_collected(self, ns: str, name: str) -> None:
        slice_name = collected_slice_name(ns, name, self.cluster_id)
        if self.collected.cache.get(f"{self.broker_ns}/{slice_name}") is not None:
            await helpers.ensure_deleted(self.broker, EndpointSlice, slice_name, namespace=self.broker_ns)

    # -- the report

    async def _write_report(self, ns: str, name: str, mcs: MultiClusterService | None,
                            report: ClusterReport | None) -> None:
        """This cluster's MultiClusterServiceReport (None: deleted). Server-side applied with force: the
        object is this cluster's alone, so whatever else changed it is overwritten."""
        rname = report_name(ns, name, self.cluster_id)
        current = self.reports.cache.get(f"{self.broker_ns}/{rname}")
        if report is None or mcs is None:
            if current is not None and self._written.get(rname, ...) is not None:
                await helpers.ensure_deleted(self.broker, MultiClusterServiceReport, rname, namespace=self.broker_ns)
                self._written[rname] = None
            return
        spec = MultiClusterServiceReportSpec(
            cluster=self.cluster_id, report=report,
            multi_cluster_service=MultiClusterServiceRef(namespace=ns, name=name, uid=mcs.metadata.uid))
        wanted = spec.to_dict()
        if current is not None and (_dump(current).get("spec") or {}) == wanted and _report_labels_ok(
                current, ns, name, self.cluster_id):
            return
        if self._written.get(rname) == wanted:
            return  # written already; the cache has not shown it yet (a busy broker's watch lags)
        owner = self._cluster_owner()
        desired = MultiClusterServiceReport(
            metadata=ObjectMeta(
                name=rname, namespace=self.broker_ns,
                labels={SOURCE_CLUSTER_LABEL: self.cluster_id, MCS_LABEL: name, MCS_NAMESPACE_LABEL: ns},
                owner_references=[OwnerReference.from_dict(owner.to_dict())] if owner is not None else None),
            spec=spec)
        await helpers.apply(self.broker, desired, field_manager=self.field_manager, force=True)
        self._written[rname] = wanted


def _report_labels_ok(obj: Any, ns: str, name: str, cluster: str) -> bool:
    labels = object_labels(obj)
    return (labels.get(SOURCE_CLUSTER_LABEL), labels.get(MCS_LABEL), labels.get(MCS_NAMESPACE_LABEL)) == (
        cluster, name, ns)


def _dump(obj: Any) -> dict[str, Any]:
    return cast(dict[str, Any], obj.to_dict())


def _without_status(d: dict[str, Any]) -> tuple[Any, ...]:
    meta = d.get("metadata") or {}
    return (d.get("spec"), meta.get("generation"), meta.get("labels"), meta.get("annotations"),
            meta.get("deletionTimestamp"))


def _not_status_only(old: Any, new: Any) -> bool:
    return old is None or _without_status(_dump(old)) != _without_status(_dump(new))


def _describe_ports(service: Service) -> str:
    ports = (service.spec.ports if service.spec is not None else None) or []
    return ", ".join(f"{p.name}:{p.port}" if p.name else str(p.port) for p in ports) or "none"


def _slice_body(obj: Any) -> tuple[Any, ...]:
    d = cast(dict[str, Any], obj.to_dict())
    meta = d.get("metadata") or {}
    return (d.get("endpoints") or [], d.get("ports") or [], meta.get("labels") or {},
            meta.get("annotations") or {}, [r.get("uid") for r in meta.get("ownerReferences") or []])
