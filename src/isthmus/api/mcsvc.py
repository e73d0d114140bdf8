"""Exposure: Karmada's MultiClusterService (`networking.karmada.io/v1alpha1`), the meeting point of
the member-side controller (`isthmus mcsvc`), the broker-side controller (`isthmus mcsvc-broker`),
admission, the CLI and the tests (docs/mcsvc.md).

The object lives on the broker, in the Service's namespace, named as the Service. `spec` is the
seed's plus Karmada's later `providerClusters` / `consumerClusters`; `status` is Karmada's
(corev1.ServiceStatus: `loadBalancer` + `conditions`) plus Isthmus's per-cluster reports
(`status.clusters`) and the resolved provider/consumer sets the printer columns show.

Broker tenancy (docs/mcsvc.md): the object's status is written by the broker controller alone.
Each member cluster reports in a `MultiClusterServiceReport` of its own in the broker namespace
(labelled with its cluster ID and guarded by the same admission policy as its ExportedServices),
which the broker controller copies into `status.clusters` and summarises.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from enum import StrEnum

from pydantic import Field

from isthmus.api.base import (
    AGE_COLUMN,
    ATOMIC_LIST,
    Conditions,
    CRDInfo,
    DNS1123Label,
    Int32,
    KubeModel,
    PrinterColumn,
    Resource,
    Time,
    list_map,
)

GROUP = "networking.karmada.io"
VERSION = "v1alpha1"
REPORT_GROUP = "isthmus.io"
REPORT_VERSION = "v1alpha1"


class ExposureType(StrEnum):
    CROSS_CLUSTER = "CrossCluster"
    """The service is discovered and reached across the consumer clusters (MCS ServiceImports)."""
    LOAD_BALANCER = "LoadBalancer"
    """The service is exposed through one external load balancer in front of every provider cluster."""


EXPOSURE_TYPES: tuple[str, ...] = tuple(t.value for t in ExposureType)

# --- well-known names ---------------------------------------------------------------------------

PERMANENT_ID_LABEL = "multiclusterservice.karmada.io/permanent-id"
"""Set once by the mutating admission step (Karmada's webhook); copied onto every derived object."""
MCS_LABEL = "isthmus.io/multiclusterservice"
"""On every object a MultiClusterService made (ServiceExports, collected EndpointSlices, pools): its name."""
MCS_NAMESPACE_LABEL = "isthmus.io/multiclusterservice-namespace"
"""On objects made for a MultiClusterService outside its namespace (broker slices, pools)."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "isthmus-mcsvc"
"""Marks a ServiceExport the MultiClusterService controller made (a user's own never carries it)."""
SLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGED_BY_VALUE = "mcsvc.isthmus.io"
"""Collected EndpointSlices on the broker (never imported by discovery: no service-name label)."""
SERVICE_PORTS_ANNOTATION = "isthmus.io/service-ports"
"""On a collected EndpointSlice: the exposed Service ports as `name=port/PROTOCOL,...` (its own
`ports` are the target ports, named like the Service's)."""
FINALIZER = "isthmus.io/multiclusterservice"
"""Held by the broker controller until every live member cluster removed what the object made."""
MEMBER_FIELD_MANAGER = "isthmus-mcsvc"
BROKER_FIELD_MANAGER = "isthmus-mcsvc-broker"
MEMBER_LEASE = "isthmus-mcsvc"
BROKER_LEASE = "isthmus-mcsvc-broker"
CONTROLLER_NAMESPACE = "isthmus-system"
MCS_POOL_PREFIX = "mcs--"
"""LoadBalancerPools of the haproxy provider: `mcs--<namespace>--<name>` (plus a hash when long)."""


class ConditionType(StrEnum):
    SERVICE_APPLIED = "ServiceApplied"
    ENDPOINT_SLICE_DISPATCHED = "EndpointSliceDispatched"
    LOAD_BALANCER_READY = "LoadBalancerReady"
    READY = "Ready"


class Reason(StrEnum):
    SERVICE_APPLIED_SUCCEED = "ServiceAppliedSucceed"
    SERVICE_APPLIED_FAILED = "ServiceAppliedFailed"
    DISPATCH_SUCCEED = "EndpointSliceDispatchedSucceed"
    DISPATCH_FAILED = "EndpointSliceDispatchedFailed"
    LB_READY = "LoadBalancerReady"
    LB_PENDING = "LoadBalancerPending"
    LB_FAILED = "LoadBalancerFailed"
    WAITING = "Waiting"
    READY = "Ready"
    NOT_READY = "NotReady"


class EventReason(StrEnum):
    """Karmada's event reasons where it has one (pkg/events), ours beside them."""

    SYNC_SERVICE_FAILED = "SyncServiceFailed"
    SYNC_SERVICE_SUCCEED = "SyncServiceSucceed"
    DISPATCH_FAILED = "DispatchEndpointSliceFailed"
    DISPATCH_SUCCEED = "DispatchEndpointSliceSucceed"
    CLUSTER_NOT_FOUND = "ClusterNotFound"
    EXPORT_OWNED_BY_USER = "ServiceExportOwnedByUser"
    LB_ENSURED = "EnsuredLoadBalancer"
    LB_FAILED = "SyncLoadBalancerFailed"
    LB_DELETED = "DeletedLoadBalancer"
    CLEANED_UP = "CleanedUp"


class ExportOwner(StrEnum):
    MCS = "MultiClusterService"
    USER = "User"


# --- the object ---------------------------------------------------------------------------------


class ExposurePort(KubeModel):
    name: str | None = None
    """The name of the Service port to expose (must match the Service's)."""
    port: Int32
    """The Service port to expose."""


class ExposureRange(KubeModel):
    cluster_names: list[str] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)
    """Clusters the service is exposed to (the seed's field; Karmada later named it consumerClusters)."""


class ClusterSelector(KubeModel):
    name: str
    """A cluster ID of the clusterset."""


class MultiClusterServiceSpec(KubeModel):
    types: list[str] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    """How to expose the service: CrossCluster and/or LoadBalancer (non-empty)."""
    ports: list[ExposurePort] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)
    """Only these Service ports are exposed; empty: all of them."""
    range: ExposureRange | None = None
    """The seed's consumer selection (kept for its users; consumerClusters is the newer name)."""
    provider_clusters: list[ClusterSelector] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)
    """Clusters whose Service backs this one; empty: every cluster of the clusterset."""
    consumer_clusters: list[ClusterSelector] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)
    """Clusters that may reach the service across clusters (CrossCluster); empty: every cluster."""


class PortStatus(KubeModel):
    port: Int32
    protocol: str = "TCP"
    error: str | None = None


class LoadBalancerIngress(KubeModel):
    ip: str | None = None
    hostname: str | None = None
    ip_mode: str | None = None
    ports: list[PortStatus] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)


class LoadBalancerStatus(KubeModel):
    """corev1.LoadBalancerStatus: what a provider reports."""

    ingress: list[LoadBalancerIngress] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)


class ClusterReport(KubeModel):
    """One member cluster's view of a MultiClusterService, written by that cluster's controller."""

    name: str
    provider: bool = False
    consumer: bool = False
    service_applied: bool | None = None
    """Provider clusters: the Service exists and its ports match spec.ports (and is exposed)."""
    reason: str = ""
    message: str = ""
    export: str | None = None
    """CrossCluster providers: who owns the ServiceExport: MultiClusterService, or User (left alone)."""
    ready_endpoints: Int32 | None = None
    """Provider clusters: ready endpoints of the Service there."""
    imported: bool | None = None
    """CrossCluster consumers: the ServiceImport is present here."""
    observed_generation: int | None = None
    last_update_time: Time | None = None


class MultiClusterServiceStatus(KubeModel):
    load_balancer: LoadBalancerStatus | None = None
    conditions: Conditions = Field(default_factory=list)
    providers: str | None = None
    """Resolved provider clusters, comma-separated (printer column)."""
    consumers: str | None = None
    """Resolved consumer clusters, comma-separated (printer column)."""
    address: str | None = None
    """The load balancer's addresses, comma-separated (printer column)."""
    observed_generation: int | None = None
    clusters: list[ClusterReport] = Field(default_factory=list, json_schema_extra=list_map("name"))


class MultiClusterService(Resource):
    """A named multi-cluster service, exposed across clusters and/or through a load balancer."""

    crd = CRDInfo(
        group=GROUP,
        version=VERSION,
        kind="MultiClusterService",
        plural="multiclusterservices",
        short_names=("mcs",),
        printer_columns=(
            PrinterColumn("Types", "string", ".spec.types", "How the service is exposed"),
            PrinterColumn("Providers", "string", ".status.providers", "Clusters backing the service"),
            PrinterColumn("Consumers", "string", ".status.consumers", "Clusters reaching it across clusters"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn("Address", "string", ".status.address", "The load balancer's addresses"),
            AGE_COLUMN,
        ),
    )

    spec: MultiClusterServiceSpec = Field(default_factory=MultiClusterServiceSpec)
    status: MultiClusterServiceStatus = Field(default_factory=MultiClusterServiceStatus)

    def has_type(self, type_: ExposureType) -> bool:
        return type_.value in self.spec.types

    @property
    def permanent_id(self) -> str:
        return (self.metadata.labels or {}).get(PERMANENT_ID_LABEL, "")

    @property
    def deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None


class MultiClusterServiceRef(KubeModel):
    namespace: DNS1123Label
    name: str = Field(min_length=1, max_length=63)
    uid: str | None = None
    """The object reported on: a report about an earlier object of the same name is not read."""


class MultiClusterServiceReportSpec(KubeModel):
    cluster: DNS1123Label
    """The reporting cluster (equal to the object's source-cluster label and to `report.name`)."""
    multi_cluster_service: MultiClusterServiceRef
    report: ClusterReport


class MultiClusterServiceReportStatus(KubeModel):
    conditions: Conditions = Field(default_factory=list)
    """Unused by Isthmus today (every CRD of ours has status conditions, kube's convention)."""


class MultiClusterServiceReport(Resource):
    """One member cluster's report on one MultiClusterService, written by that cluster's `isthmus mcsvc`
    in the broker namespace: the only exposure object a member writes on the broker (docs/mcsvc.md,
    "Broker tenancy"). The broker controller copies it into the object's `status.clusters`."""

    crd = CRDInfo(
        group=REPORT_GROUP,
        version=REPORT_VERSION,
        kind="MultiClusterServiceReport",
        plural="multiclusterservicereports",
        short_names=("mcsreport",),
        categories=("isthmus",),
        printer_columns=(
            PrinterColumn("Cluster", "string", ".spec.cluster"),
            PrinterColumn("Namespace", "string", ".spec.multiClusterService.namespace"),
            PrinterColumn("Service", "string", ".spec.multiClusterService.name"),
            PrinterColumn("Provider", "boolean", ".spec.report.provider"),
            PrinterColumn("Applied", "boolean", ".spec.report.serviceApplied"),
            PrinterColumn("Reason", "string", ".spec.report.reason"),
            AGE_COLUMN,
        ),
    )

    spec: MultiClusterServiceReportSpec
    status: MultiClusterServiceReportStatus = Field(default_factory=lambda: MultiClusterServiceReportStatus())


MCSVC_MODELS: tuple[type[Resource], ...] = (MultiClusterService, MultiClusterServiceReport)

# --- pure helpers shared by both controllers and the CLI ----------------------------------------


def named_providers(mcs: MultiClusterService) -> list[str]:
    return [c.name for c in mcs.spec.provider_clusters or []]


def named_consumers(mcs: MultiClusterService) -> list[str]:
    """consumerClusters, else the seed's range.clusterNames (admission refuses two different lists)."""
    if mcs.spec.consumer_clusters:
        return [c.name for c in mcs.spec.consumer_clusters]
    return list(mcs.spec.range.cluster_names or []) if mcs.spec.range is not None else []


def resolve(named: Sequence[str], known: Iterable[str]) -> tuple[list[str], list[str]]:
    """(selected, unknown): empty `named` selects every known cluster; unknown names are ignored."""
    registered = sorted(set(known))
    if not named:
        return registered, []
    selected = sorted({n for n in named if n in registered})
    unknown = sorted({n for n in named if n not in registered})
    return selected, unknown


def port_selector(ports: Sequence[ExposurePort] | None) -> str | None:
    """spec.ports as discovery's exported-ports annotation (None: every port)."""
    if not ports:
        return None
    return ",".join(f"{p.name}:{p.port}" if p.name else str(p.port) for p in ports)


def pool_name(namespace: str, name: str) -> str:
    """The haproxy provider's LoadBalancerPool (cluster-scoped, so namespaced by name)."""
    base = f"{MCS_POOL_PREFIX}{namespace}--{name}"
    if len(base) <= 63:
        return base
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    return f"{base[:52]}-{digest}"


def collected_slice_name(namespace: str, name: str, cluster: str) -> str:
    """A provider cluster's collected EndpointSlice on the broker (broker namespace): unambiguous."""
    digest = hashlib.sha256(f"{namespace}/{name}/{cluster}".encode()).hexdigest()[:10]
    return f"mcsvc-{name[:30]}-{cluster[:15]}-{digest}"


def report_name(namespace: str, name: str, cluster: str) -> str:
    """A member cluster's MultiClusterServiceReport on the broker (broker namespace): unambiguous, and
    the only name the broker controller reads a report of that cluster under."""
    return collected_slice_name(namespace, name, cluster)


def format_service_ports(ports: Iterable[tuple[str, int, str]]) -> str:
    return ",".join(f"{name}={port}/{proto}" for name, port, proto in ports)


def parse_service_ports(value: str | None) -> list[tuple[str, int, str]]:
    """`name=port/PROTO,...` → [(name, port, proto)]; malformed entries are skipped."""
    out: list[tuple[str, int, str]] = []
    for item in (value or "").split(","):
        name, _, rest = item.strip().partition("=")
        port, _, proto = rest.partition("/")
        if port.isascii() and port.isdigit():
            out.append((name, int(port), proto or "TCP"))
    return out


__all__ = [name for name in dir() if not name.startswith("_")]
