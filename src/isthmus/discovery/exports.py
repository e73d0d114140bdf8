"""Publishing this cluster's exports to the broker, and telling the user where each stands.

For one service, from the ServiceExport, the Service and kube's EndpointSlices of it:

- this cluster's view on the broker: its ExportedService, carrying the service's VIP as this
  cluster holds it (decided by aggregates.py), or its withdrawal when the export is gone or invalid
  (a malformed annotation leaves what is published as it is);
- this cluster's EndpointSlice on the broker (docs/discovery.md "EndpointSlice content");
- the ServiceExport's Valid / Ready / Conflict conditions and their Events (docs/discovery.md
  "ServiceExport conditions"), once the aggregate is known.

What is published is owned by this cluster's broker `Cluster` (so deleting the Cluster collects it).
Writes are compared with the cache first, and with what this agent last wrote while the broker's
watch has not shown it yet (`ExportPublisher._published`). The translation itself is pure
(endpoints.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import OwnerReference as LkOwnerReference
from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.base import (
    Condition,
    ObjectMeta,
    OwnerReference,
    find_condition,
    merge_conditions,
    new_condition,
)
from isthmus.api.mcs import (
    AGENT_FIELD_MANAGER,
    EXPORTED_PORTS_ANNOTATION,
    ISTHMUS_GROUP,
    ISTHMUS_VERSION,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    ConditionType,
    ConflictReason,
    ExportedService,
    ExportedServiceSpec,
    ReadyReason,
    ServiceExport,
    ServiceImportType,
    ValidReason,
    broker_object_name,
    conflict_condition,
)
from isthmus.discovery.aggregates import AggregateState, Aggregator
from isthmus.discovery.caches import BY_KUBE_SERVICE, Caches, conditions_key, dump, slice_body
from isthmus.discovery.endpoints import (
    InvalidAnnotation,
    PortSelector,
    broker_slice,
    consumer_clusters,
    export_view,
    exported_ports,
    port_selected,
    validate_export,
    vip_setting,
)
from isthmus.kube import helpers
from isthmus.runtime import NORMAL, WARNING, EventRecorder, object_name, object_namespace

__all__ = ["ExportPublisher", "ExportState"]

log = logging.getLogger(__name__)


@dataclass
class ExportState:
    """What publishing found out about this cluster's export of one service."""

    export: ServiceExport | None = None
    valid: bool = False
    reason: str = ""
    message: str = ""
    type: ServiceImportType | None = None
    spec: ExportedServiceSpec | None = None  # published view (None: not exporting)
    hold: bool = False  # malformed annotation: leave what is published as it is
    failure: str = ""  # why publishing failed (Ready=False Failed)
    pending: str = ""  # why it is not exported yet although nothing failed (Ready=False Pending)
    service: Service | None = None
    selectors: list[PortSelector] | None = None  # exported-ports annotation (None: every port)
    consumers: list[str] | None = None  # consumer-clusters annotation (None: every cluster)
    published: bool = False  # this pass created the export's view on the broker


class ExportPublisher:
    """This cluster's exports: its views and slices on the broker, the ServiceExports' conditions."""

    def __init__(self, *, cluster: AsyncClient, broker: AsyncClient, cluster_id: str, clusterset_ip_enabled: bool,
                 aggregator: Aggregator, recorder: EventRecorder) -> None:
        self.cluster = cluster
        self.broker = broker
        self.cluster_id = cluster_id
        self.clusterset_ip_enabled = clusterset_ip_enabled
        self.aggregator = aggregator
        self.recorder = recorder
        self._owner: tuple[Any, LkOwnerReference | None] = (None, None)
        self._published: dict[str, Any] = {}
        """What this agent last wrote of its own broker objects ("es/<name>", "slice/<name>"): while the
        cache lags behind its own writes, the same write is not sent again. Forgotten as soon as the
        cache shows the object again (our write, or anyone else's), or it is withdrawn: at 10,000
        services nothing of it stays in memory once the broker's watch has caught up."""

    def attach(self, caches: Caches) -> None:
        """Start a leadership term over `caches`."""
        self.caches = caches
        self._published = {}
        # Whatever the cache shows of one of our broker objects, written by us or changed by anyone
        # else, replaces what we remember having written (see _published).
        caches.b_exports.add_handler(on_add=lambda o: self._forget("es", o),
                                     on_update=lambda _o, n: self._forget("es", n),
                                     on_delete=lambda o: self._forget("es", o))
        caches.b_slices.add_handler(on_add=lambda o: self._forget("slice", o),
                                    on_update=lambda _o, n: self._forget("slice", n),
                                    on_delete=lambda o: self._forget("slice", o))

    def _forget(self, kind: str, obj: Any) -> None:
        self._published.pop(f"{kind}/{object_name(obj)}", None)

    async def report_waiting(self, why: str) -> None:
        """Started while the broker is unreachable: nothing can be published, but every export says
        why (Ready=False Pending) instead of staying silent until the broker answers."""
        for raw in self.caches.exports.cache.list():
            state = ExportState(pending=why)
            self.check(object_namespace(raw) or "", object_name(raw), state)
            try:
                await self.sync_conditions(state, AggregateState())
            except Exception as e:
                log.warning("could not report on %s/%s: %s", object_namespace(raw), object_name(raw),
                            helpers.describe_error(e))

    # ------------------------------------------------------------------ this cluster's view on the broker

    def _cluster_owner(self) -> LkOwnerReference | None:
        """Our Cluster on the broker as the owner of what we publish there. Read-only: one instance
        per cached Cluster object, shared by every object that names it."""
        obj = self.caches.broker_cluster(self.cluster_id)
        if obj is None:
            return None
        if self._owner[0] is not obj:
            uid = dump(obj).get("metadata", {}).get("uid")
            self._owner = (obj, LkOwnerReference(apiVersion=f"{ISTHMUS_GROUP}/{ISTHMUS_VERSION}", kind="Cluster",
                                                 name=self.cluster_id, uid=uid, blockOwnerDeletion=False))
        return self._owner[1]

    def check(self, ns: str, name: str, state: ExportState) -> bool | None:
        """The local half of publishing (no broker needed): fills `state`; returns the export's VIP wish
        when it can be published, None when it cannot."""
        caches = self.caches
        raw = caches.exports.cache.get(f"{ns}/{name}")
        if raw is None:
            return None
        export = caches.parsed(ServiceExport, raw)
        service = caches.services.cache.get(f"{ns}/{name}")
        state.export, state.service = export, service
        try:
            vip = vip_setting(export.metadata.annotations, self.clusterset_ip_enabled)
            state.selectors = exported_ports(export.metadata.annotations)
            state.consumers = consumer_clusters(export.metadata.annotations)
        except InvalidAnnotation as e:
            state.reason, state.message, state.hold = ValidReason.INVALID_ANNOTATION, str(e), True
            return None
        state.valid, state.reason, state.message, state.type = validate_export(service)
        if state.valid and service is not None and state.selectors is not None and not any(
                port_selected(state.selectors, p.name, p.port)
                for p in (service.spec.ports if service.spec is not None else None) or []):
            state.valid, state.reason = False, ValidReason.INVALID_ANNOTATION
            state.message = (f"no port of the Service matches annotation {EXPORTED_PORTS_ANNOTATION} "
                             f"({(export.metadata.annotations or {}).get(EXPORTED_PORTS_ANNOTATION)})")
        return vip if state.valid and service is not None else None

    async def sync_export(self, ns: str, name: str, state: ExportState) -> None:
        """Fills `state` as it learns, so a broker failure half-way still leaves what was found."""
        vip = self.check(ns, name, state)
        if vip is None:
            if not state.hold:  # a malformed annotation leaves what is published as it is
                await self._withdraw(ns, name)
            return
        export, service = state.export, state.service
        assert export is not None and service is not None
        owner = self._cluster_owner()
        if owner is None:
            state.failure = (f"cluster {self.cluster_id} is not registered on the broker "
                             "(it left or never joined): run `isthmus join`")
            return
        created = export.metadata.creation_timestamp or datetime.now(UTC)
        spec = export_view(self.cluster_id, service, created, export.spec.exported_labels,
                           export.spec.exported_annotations, vip, selectors=state.selectors,
                           consumers=state.consumers)
        bname = broker_object_name(name, ns, self.cluster_id)
        broker_ns = self.caches.broker_ns
        current = self.caches.b_exports.cache.get(f"{broker_ns}/{bname}")
        key = f"es/{bname}"
        published = self._published.get(key)
        before = published if isinstance(published, ExportedServiceSpec) else (
            self.caches.export_spec(current) if current is not None else None)
        spec, failure = self.aggregator.decide_vip(ns, name, spec, before,
                                                   headless=state.type == ServiceImportType.HEADLESS)
        if failure:
            state.failure = failure
        state.spec = spec
        if current is None or self.caches.export_spec(current) != spec:
            if self._published.get(key) == spec:
                return  # written already; the cache has not shown it yet (a busy broker's watch lags)
            desired = ExportedService(
                metadata=ObjectMeta(
                    name=bname, namespace=broker_ns,
                    labels={SERVICE_NAME_LABEL: name, SOURCE_NAMESPACE_LABEL: ns, SOURCE_CLUSTER_LABEL: self.cluster_id},
                    owner_references=[OwnerReference.from_dict(owner.to_dict())],
                ),
                spec=spec,
            )
            await helpers.apply_quiet(self.broker, desired, field_manager=AGENT_FIELD_MANAGER, force=True)
            self._published[key] = spec
            state.published = current is None

    async def _withdraw(self, ns: str, name: str) -> None:
        bname = broker_object_name(name, ns, self.cluster_id)
        broker_ns = self.caches.broker_ns
        self.aggregator.hold(bname, None)
        self._published.pop(f"es/{bname}", None)
        self._published.pop(f"slice/{bname}", None)
        if self.caches.b_exports.cache.get(f"{broker_ns}/{bname}") is not None:
            await helpers.ensure_deleted(self.broker, ExportedService, bname, namespace=broker_ns)
        if self.caches.b_slices.cache.get(f"{broker_ns}/{bname}") is not None:
            await helpers.ensure_deleted(self.broker, EndpointSlice, bname, namespace=broker_ns)

    # ------------------------------------------------------------------ this cluster's EndpointSlice on the broker

    async def sync_slice(self, ns: str, name: str, state: ExportState, agg: AggregateState) -> None:
        if state.spec is None or state.service is None:
            return
        use_pod_ips = state.type == ServiceImportType.HEADLESS or bool(agg.current and agg.current.spec.ips)
        if agg.current is None and not use_pod_ips:
            use_pod_ips = state.spec.clusterset_ip_enabled  # about to get a VIP: skip a ClusterIP round trip
        caches = self.caches
        own = caches.slices.cache.by_index(BY_KUBE_SERVICE, f"{ns}/{name}")
        desired = broker_slice(self.cluster_id, ns, state.service, own, use_pod_ips, selectors=state.selectors)
        assert desired.metadata is not None
        desired.metadata.namespace = caches.broker_ns
        owner = self._cluster_owner()
        desired.metadata.ownerReferences = [owner] if owner else None
        current = caches.b_slices.cache.get(f"{caches.broker_ns}/{desired.metadata.name}")
        if current is None or slice_body(current) != slice_body(desired):
            key = f"slice/{desired.metadata.name}"
            if self._published.get(key) == slice_body(desired):
                return  # written already; the cache has not shown it yet
            await helpers.apply_quiet(self.broker, desired, field_manager=AGENT_FIELD_MANAGER, force=True)
            self._published[key] = slice_body(desired)

    # ------------------------------------------------------------------ conditions on the ServiceExport

    async def sync_conditions(self, state: ExportState, agg: AggregateState) -> None:
        export = state.export
        if export is None:
            return
        gen = export.metadata.generation
        conds: list[Condition] = [new_condition(ConditionType.VALID, state.valid or False,
                                                state.reason if not state.hold else ValidReason.INVALID_ANNOTATION,
                                                state.message, gen)]
        failure = state.failure or agg.failure
        exported = bool(agg.current and any(c.cluster == self.cluster_id for c in agg.current.status.clusters))
        if failure:
            conds.append(new_condition(ConditionType.READY, False, ReadyReason.FAILED, failure, gen))
        elif state.valid and exported:
            conds.append(new_condition(ConditionType.READY, True, ReadyReason.EXPORTED,
                                       "the service is exported to the clusterset", gen))
        elif state.valid:
            conds.append(new_condition(ConditionType.READY, False, ReadyReason.PENDING,
                                       state.pending or "waiting for the broker to aggregate the export", gen))
        else:
            conds.append(new_condition(ConditionType.READY, False, ReadyReason.PENDING,
                                       f"not exported: {state.message}", gen))
        conflicts = agg.result.conflicts if (agg.result and state.valid and exported) else []
        conds.append(conflict_condition(conflicts, gen))
        merged = merge_conditions(export.status.conditions, conds)
        if conditions_key(merged) == conditions_key(export.status.conditions):
            return
        raw = self.caches.exports.cache.get(f"{export.metadata.namespace}/{export.metadata.name}")
        if raw is not None:
            for kind, reason, message in _condition_events(export.status.conditions, merged):
                self.recorder.event(raw, kind, reason, message)
        # A copy: the parsed export is shared (Caches.parsed) and stays what the cache holds.
        written = export.model_copy(update={"status": export.status.model_copy(update={"conditions": merged})})
        try:
            await helpers.patch_status_quiet(self.cluster, written, field_manager=AGENT_FIELD_MANAGER,
                                             patch_type=PatchType.MERGE)
        except ApiError as e:
            if not helpers.is_not_found(e):  # deleted meanwhile: nothing to report on
                raise


def _condition_events(before: list[Condition] | None, after: list[Condition]) -> list[tuple[str, str, str]]:
    """The Events a ServiceExport's condition change deserves: a Warning when a problem appears (or
    changes), a Normal one when it clears or the export first becomes ready."""
    out: list[tuple[str, str, str]] = []

    def pair(type_: str) -> tuple[Condition | None, Condition | None]:
        return find_condition(before, type_), find_condition(after, type_)

    old, new = pair(ConditionType.VALID)
    if new is not None and str(new.status) == "False" and (old is None or (old.status, old.reason, old.message)
                                                             != (new.status, new.reason, new.message)):
        out.append((WARNING, new.reason, new.message))
    elif new is not None and str(new.status) == "True" and old is not None and str(old.status) == "False":
        out.append((NORMAL, new.reason, "the export is valid again"))
    old, new = pair(ConditionType.READY)
    if new is not None and new.reason == ReadyReason.FAILED and (old is None or old.message != new.message):
        out.append((WARNING, new.reason, new.message))
    elif new is not None and str(new.status) == "True" and (old is None or str(old.status) != "True"):
        out.append((NORMAL, new.reason, new.message))
    old, new = pair(ConditionType.CONFLICT)
    if new is not None and str(new.status) == "True" and (old is None or (old.status, old.reason, old.message)
                                                            != (new.status, new.reason, new.message)):
        out.append((WARNING, new.reason, new.message))
    elif new is not None and str(new.status) == "False" and old is not None and str(old.status) == "True":
        out.append((NORMAL, ConflictReason.NO_CONFLICTS, f"conflict resolved (was: {old.reason})"))
    return out
