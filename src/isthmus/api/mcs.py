"""Discovery capability API: MCS kinds (multicluster.x-k8s.io), Isthmus broker kinds (isthmus.io),
and every well-known label, annotation and condition string of the capability.

Broker-side objects (Broker, Cluster, ExportedService) are namespaced: they all live in the broker
namespace, so a joining cluster's credentials can be scoped to it. No aggregated ServiceImport is
stored there: every agent derives it from the ExportedServices (docs/discovery.md "Broker tenancy").
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from isthmus.api.base import (
    AGE_COLUMN,
    ATOMIC_LIST,
    IPV4_CIDR_PATTERN,
    Condition,
    Conditions,
    CRDInfo,
    DNS1123Label,
    Int32,
    KubeModel,
    PortNumber,
    PrinterColumn,
    Resource,
    StringMap,
    Time,
    list_map,
    new_condition,
)

# --- groups -------------------------------------------------------------------------------------

MCS_GROUP = "multicluster.x-k8s.io"
MCS_VERSION = "v1beta1"
"""The storage version, the one Isthmus speaks (mcs-api v0.5); MCS_OLDER_VERSIONS stay served."""
MCS_OLDER_VERSIONS = ("v1alpha1",)
ISTHMUS_GROUP = "isthmus.io"
ISTHMUS_VERSION = "v1alpha1"

# --- annotations and labels ---------------------------------------------------------------------

USE_CLUSTERSET_IP_ANNOTATION = "lighthouse.submariner.io/use-clusterset-ip"
"""On a ServiceExport (and copied to the aggregated ServiceImport): "true"/"false" — use a VIP."""
CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION = "lighthouse.submariner.io/clusterset-ip-allocated-by"
"""On a ServiceImport: the cluster ID whose CIDR the VIP in spec.ips came from."""

SERVICE_NAME_LABEL = "multicluster.kubernetes.io/service-name"
"""On imported EndpointSlices (and broker objects): the exported Service's name."""
SOURCE_CLUSTER_LABEL = "multicluster.kubernetes.io/source-cluster"
"""On imported EndpointSlices (and broker objects): the cluster ID the endpoints come from."""
SOURCE_NAMESPACE_LABEL = "isthmus.io/source-namespace"
"""On broker objects: the exported Service's namespace (broker objects all live in the broker namespace)."""
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "endpointslice-controller.isthmus.io"
"""Our managed-by value: not kube's `endpointslice-controller.k8s.io`, so kube's controller leaves our slices alone."""
KUBE_SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""Kube's label binding a slice to a local Service: our imported slices must never carry it."""
EXPORTED_PORTS_ANNOTATION = "isthmus.io/exported-ports"
"""On a ServiceExport: only these Service ports are exported (comma-separated `port` or `name:port`;
absent = every port). Written by the MultiClusterService controller from `spec.ports`."""
CONSUMER_CLUSTERS_ANNOTATION = "isthmus.io/consumer-clusters"
"""On a ServiceExport: the clusters that may import this cluster's export (comma-separated cluster
IDs; absent = every cluster, empty = none). Written by the MultiClusterService controller."""
AFFINITY_ANNOTATION = "isthmus.io/affinity"
"""On a ServiceImport (an exported annotation of its ServiceExports): `local` (prefer the asking
cluster's own endpoints), `remote` (prefer other clusters'), `none` (no preference). DNS answers and
the proxy honour it, falling back to the other side when the preferred one has no ready endpoint.
The explicit form of a preference: it overrides the ServiceImport's `trafficDistribution`."""
AFFINITY_VALUES = ("local", "remote", "none")


def preference(value: str | None) -> str:
    """An affinity annotation as DNS and the proxy use it: `local`, `remote`, or "" (none, absent,
    or a value they do not know: no preference)."""
    v = (value or "").strip().lower()
    return v if v in ("local", "remote") else ""


def unknown_affinity(annotations: Mapping[str, str] | None) -> str | None:
    """The affinity annotation's value when it is set but not one of AFFINITY_VALUES (what DNS and
    the proxy log, once); None when absent, empty or known."""
    raw = (annotations or {}).get(AFFINITY_ANNOTATION) or ""
    return None if not raw.strip() or raw.strip().lower() in AFFINITY_VALUES else raw


TRAFFIC_DISTRIBUTION_LOCAL = ("PreferClose", "PreferSameZone", "PreferSameNode")
"""`spec.trafficDistribution` values read as `local`. Kube means "same zone" (PreferClose, since
KEP-3015 a deprecated alias of PreferSameZone) or "same node"; KEP-1645 leaves multi-cluster
distribution unspecified. Isthmus's reading: the nearest thing an import can offer is the asking
cluster itself, so all three mean "this cluster's endpoints first". Exact spelling, as kube's
Service validation accepts them."""


def effective_preference(annotations: Mapping[str, str] | None, traffic_distribution: str | None) -> str:
    """What DNS and the proxy steer by for one ServiceImport: `local`, `remote` or "" (none).

    A known isthmus.io/affinity value wins, `none` included: it is the explicit form, written for
    Isthmus, while trafficDistribution is copied from a Service written for kube. An unknown
    annotation counts as absent, so trafficDistribution still decides; an unknown
    trafficDistribution is no preference (kube-proxy ignores values it does not know as well)."""
    raw = (annotations or {}).get(AFFINITY_ANNOTATION) or ""
    if raw.strip().lower() in AFFINITY_VALUES:
        return preference(raw)
    return "local" if traffic_distribution in TRAFFIC_DISTRIBUTION_LOCAL else ""


def unknown_traffic_distribution(
    annotations: Mapping[str, str] | None, traffic_distribution: str | None
) -> str | None:
    """The trafficDistribution value when it decides (no known affinity annotation overrides it)
    and is not one Isthmus reads (what DNS and the proxy log, once); None otherwise."""
    if not traffic_distribution or traffic_distribution in TRAFFIC_DISTRIBUTION_LOCAL:
        return None
    raw = (annotations or {}).get(AFFINITY_ANNOTATION) or ""
    return None if raw.strip().lower() in AFFINITY_VALUES else traffic_distribution


def traffic_distribution(spec: Any) -> str | None:
    """A ServiceImport spec's (a mapping, as the caches hold it) trafficDistribution, if a string."""
    value = spec.get("trafficDistribution") if isinstance(spec, Mapping) else None
    return value if isinstance(value, str) else None


def unknown_import_distribution(obj: Any) -> str | None:
    """`unknown_traffic_distribution` of a cached ServiceImport (None for none): what DNS and the proxy
    log, once per import and value."""
    if obj is None:
        return None
    return unknown_traffic_distribution(obj.metadata.annotations, traffic_distribution(obj.get("spec")))

# --- settings and defaults ----------------------------------------------------------------------

CLUSTERSET_DOMAIN = "clusterset.local"
DEFAULT_CLUSTERSET_IP_CIDR_RANGE = "243.0.0.0/8"
DEFAULT_CLUSTER_CIDR_PREFIX = 16
"""Each cluster's VIP block is a /16 of the clusterset range unless asked otherwise (as in Submariner)."""
DEFAULT_CLUSTER_CIDR_PREFIX_V6 = 64
"""Each cluster's IPv6 VIP block is a /64 of the range: the unit IPv6 networks are planned in (RFC 4291
interface IDs, so a block never needs more bits), 2**64 VIPs are never exhausted, and a /48 range still
holds 65536 clusters, so carving never runs out before the clusterset does."""
DEFAULT_BROKER_NAMESPACE = "isthmus-broker"
BROKER_NAME = "broker"
"""The one Broker object in a broker namespace."""
BROKER_INFO_CONFIGMAP = "broker-info"
AGENT_NAMESPACE = "isthmus-system"
"""Where join stores a member cluster's discovery settings and broker credentials."""
SERVICE_DISCOVERY_NAME = "isthmus"
BROKER_SECRET_NAME = "isthmus-broker"
BROKER_SECRET_KEY = "broker-info"
AGENT_LEASE_NAME = "isthmus-agent"
AGENT_FIELD_MANAGER = "isthmus-agent"
JOIN_SERIAL_ANNOTATION = "isthmus.io/join-serial"
"""On the Broker: bumped by every join that changed a Cluster; the bump's resourceVersion check
serializes concurrent joins (module docstring)."""
CLUSTER_UID_ANNOTATION = "isthmus.io/cluster-uid"
"""On a Cluster: UID of the member's kube-system namespace, telling a re-join of the same cluster
from a different cluster claiming a taken ID."""
HEARTBEAT_ANNOTATION = "isthmus.io/heartbeat"
"""On the broker's Cluster object: when the cluster's agent last checked in (RFC3339)."""
DNS_SERVICE_NAME = "isthmus-dns"
"""The Service (in AGENT_NAMESPACE) in front of a member's DNS servers: CoreDNS's clusterset.local stub
zone forwards to its ClusterIP."""

# --- broker credentials -------------------------------------------------------------------------

BROKER_MEMBER_ROLE = "isthmus-broker-member"
"""Role in the broker namespace (deploy/broker) with what every member's agent needs there."""
BROKER_MEMBER_WRITES_POLICY = "isthmus-broker-member-writes"
"""ValidatingAdmissionPolicy (and its binding) letting a member write only broker objects labelled
with its own cluster ID."""
BROKER_TOKEN_SECONDS = 365 * 24 * 3600
"""Lifetime of the broker token join requests for a member (re-running join renews it)."""
CLUSTER_SA_PREFIX = "cluster-"
"""A member's ServiceAccount on the broker is `cluster-<id>`: the policy reads the ID from its name."""


def cluster_service_account(cluster_id: str) -> str:
    """The broker ServiceAccount whose tokens are cluster `cluster_id`'s broker credentials."""
    return f"{CLUSTER_SA_PREFIX}{cluster_id}"


def cluster_role_name(cluster_id: str) -> str:
    """Role (and its RoleBinding) on the broker letting cluster `cluster_id` write its own Cluster."""
    return f"isthmus-cluster-{cluster_id}"


def member_binding_name(cluster_id: str) -> str:
    """RoleBinding on the broker granting cluster `cluster_id` the shared BROKER_MEMBER_ROLE."""
    return f"{BROKER_MEMBER_ROLE}-{cluster_id}"


STALE_HEARTBEAT_SECONDS = 30.0
"""A heartbeat older than this (three missed beats) is shown as stale by `show clusters` and `status`."""
DEFAULT_DEAD_CLUSTER_GRACE = 60.0
"""Seconds without a heartbeat after which a cluster's endpoints are withdrawn from every import."""

# --- conditions ---------------------------------------------------------------------------------


class ConditionType(StrEnum):
    """Condition types on a ServiceExport."""

    VALID = "Valid"
    READY = "Ready"
    CONFLICT = "Conflict"


class ValidReason(StrEnum):
    VALID = "Valid"
    NO_SERVICE = "NoService"
    INVALID_SERVICE_TYPE = "InvalidServiceType"
    INVALID_ANNOTATION = "InvalidAnnotation"
    """Ours: the use-clusterset-ip annotation is neither "true" nor "false"."""


class ReadyReason(StrEnum):
    EXPORTED = "Exported"
    READY = "Ready"
    PENDING = "Pending"
    FAILED = "Failed"


class ClusterReason(StrEnum):
    """Reasons of the Ready condition on a broker `Cluster`."""

    AGENT_RUNNING = "AgentRunning"
    AGENT_SILENT = "AgentSilent"
    """Written by older agents on a silent peer's Cluster. No longer written (a member may write only
    its own Cluster): observers post an `EndpointsWithdrawn` Event instead."""


class ClusterEventReason(StrEnum):
    """Events posted on a broker `Cluster` when its endpoints are withdrawn or restored."""

    WITHDRAWN = "EndpointsWithdrawn"
    RESTORED = "EndpointsRestored"


class ConflictReason(StrEnum):
    PORT = "PortConflict"
    TYPE = "TypeConflict"
    SESSION_AFFINITY = "SessionAffinityConflict"
    SESSION_AFFINITY_CONFIG = "SessionAffinityConfigConflict"
    LABELS = "LabelsConflict"
    ANNOTATIONS = "AnnotationsConflict"
    INTERNAL_TRAFFIC_POLICY = "InternalTrafficPolicyConflict"
    TRAFFIC_DISTRIBUTION = "TrafficDistributionConflict"
    IP_FAMILY = "IPFamilyConflict"
    """An exporter lacks one of the ServiceImport's IP families, so traffic over that family reaches
    only the other clusters' endpoints (upstream raises it only then)."""
    CLUSTERSET_IP_ENABLEMENT = "ClusterSetIPEnablementConflict"
    """Ours: the export's VIP setting differs from the aggregate's (oldest export wins)."""
    NO_CONFLICTS = "NoConflicts"


class ImportConditionType(StrEnum):
    """Condition types on a ServiceImport (set by the importing cluster's agent)."""

    READY = "Ready"


class ImportReadyReason(StrEnum):
    """Reasons of a ServiceImport's Ready condition (mcs-api v1beta1)."""

    READY = "Ready"
    PENDING = "Pending"
    """Being set up: the ClusterSet IP or some exporting cluster's EndpointSlice is not in place yet."""
    IP_FAMILY_NOT_SUPPORTED = "IPFamilyNotSupported"
    """None of the ServiceImport's IP families is one this cluster serves."""


def conflict_condition(
    conflicts: Sequence[tuple[ConflictReason | str, str]],
    observed_generation: int | None = None,
    at: datetime | None = None,
) -> Condition:
    """The one `Conflict` condition for a set of (reason, message) conflicts.

    No conflicts → `False NoConflicts`; otherwise `True` with the reasons comma-joined (in the order
    given, duplicates dropped) and the messages joined with "; ".
    """
    if not conflicts:
        return new_condition(
            ConditionType.CONFLICT, False, ConflictReason.NO_CONFLICTS, "", observed_generation, at
        )
    reasons = list(dict.fromkeys(str(r) for r, _ in conflicts))
    messages = [m for _, m in conflicts if m]
    return new_condition(
        ConditionType.CONFLICT, True, ",".join(reasons), "; ".join(messages), observed_generation, at
    )


# --- shared field types -------------------------------------------------------------------------


class ServiceImportType(StrEnum):
    """type of a multi-cluster service: ClusterSetIP (one VIP or the clusters' IPs) or Headless."""

    CLUSTER_SET_IP = "ClusterSetIP"
    HEADLESS = "Headless"


Protocol = Literal["TCP", "UDP", "SCTP"]
SessionAffinity = Literal["None", "ClientIP"]
IPFamily = Literal["IPv4", "IPv6"]
TrafficPolicy = Literal["Cluster", "Local"]


class ServicePort(KubeModel):
    """ServicePort represents the port on which the service is exposed."""

    name: str | None = None
    """The name of this port within the service (a DNS label); ports of a service merge by name."""
    protocol: Protocol = "TCP"
    """The IP protocol for this port: TCP, UDP or SCTP. Default is TCP."""
    app_protocol: str | None = None
    """The application protocol for this port (a label-syntax name, e.g. http or mycompany.com/proto)."""
    port: PortNumber
    """The port that will be exposed by this service."""


class ClientIPConfig(KubeModel):
    """ClientIPConfig represents the configurations of Client IP based session affinity."""

    timeout_seconds: Int32 | None = Field(default=None, ge=1, le=86400)
    """Seconds of ClientIP session stickiness, 1..86400; kube's default is 10800 (3 hours)."""


class SessionAffinityConfig(KubeModel):
    """SessionAffinityConfig represents the configurations of session affinity."""

    client_ip: ClientIPConfig | None = Field(default=None, alias="clientIP")
    """clientIP contains the configurations of Client IP based session affinity."""


# --- ServiceExport ------------------------------------------------------------------------------


class ServiceExportSpec(KubeModel):
    """What to carry over to the ServiceImport besides the Service itself."""

    exported_labels: StringMap | None = None
    """Labels copied to the ServiceImport in every cluster."""
    exported_annotations: StringMap | None = None
    """Annotations copied to the ServiceImport in every cluster."""


class ServiceExportStatus(KubeModel):
    """status describes the current state of an exported service (conditions Valid, Ready, Conflict)."""

    conditions: Conditions = Field(default_factory=list)


class ServiceExport(Resource):
    """ServiceExport declares that the Service with the same name and namespace as this export
    should be consumable from other clusters."""

    crd = CRDInfo(
        group=MCS_GROUP,
        version=MCS_VERSION,
        older_versions=MCS_OLDER_VERSIONS,
        kind="ServiceExport",
        plural="serviceexports",
        short_names=("svcex", "svcexport"),
        printer_columns=(
            PrinterColumn("Valid", "string", '.status.conditions[?(@.type=="Valid")].status'),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn("Conflict", "string", '.status.conditions[?(@.type=="Conflict")].status'),
            PrinterColumn("Reason", "string", '.status.conditions[?(@.type=="Conflict")].reason', priority=1),
            AGE_COLUMN,
        ),
    )

    spec: ServiceExportSpec = Field(default_factory=ServiceExportSpec)
    status: ServiceExportStatus = Field(default_factory=ServiceExportStatus)


# --- ServiceImport ------------------------------------------------------------------------------


class ServiceImportSpec(KubeModel):
    """spec defines the behavior of a ServiceImport."""

    model_config = ConfigDict(json_schema_extra={"required": ["type", "ports"]})  # ports may be []

    type: ServiceImportType
    """type defines the type of this service. Must be ClusterSetIP or Headless."""
    ports: list[ServicePort] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    """The union of the exporting clusters' ports, merged by name (oldest export wins a name)."""
    ips: list[str] | None = Field(default=None, max_length=2)
    """The ClusterSet IP (VIP) of this service; empty when it has none."""
    ip_families: list[IPFamily] | None = Field(default=None, max_length=2)
    """IP families of ips (as Service.spec.ipFamilies)."""
    session_affinity: SessionAffinity | None = None
    """ClientIP or None (the default). Ignored when type is Headless."""
    session_affinity_config: SessionAffinityConfig | None = None
    """sessionAffinityConfig contains session affinity configuration."""
    internal_traffic_policy: TrafficPolicy | None = None
    """Cluster or Local, copied from the exported Service."""
    traffic_distribution: str | None = None
    """Traffic distribution preference (e.g. PreferClose), copied from the exported Service."""


class ClusterStatus(KubeModel):
    """ClusterStatus contains service configuration mapped to a specific source cluster."""

    cluster: DNS1123Label
    """cluster is the name (ID) of the exporting cluster. Must be a valid RFC-1123 DNS label."""


class ServiceImportStatus(KubeModel):
    """status contains information about the exported services that form the multi-cluster service."""

    clusters: list[ClusterStatus] = Field(default_factory=list, json_schema_extra=list_map("cluster"))
    """clusters is the list of exporting clusters from which this service was derived."""
    conditions: Conditions = Field(default_factory=list)
    """Ready: whether the import is in place in this cluster (Ready, Pending, IPFamilyNotSupported)."""
    endpoint_slice_objects: Literal["Present", "Absent"] | None = None
    """Whether imported EndpointSlice objects exist for this import (KEP-1645, mcs-api after v0.5.0):
    Isthmus always makes them, so `Present`."""


class ServiceImport(Resource):
    """ServiceImport describes a service imported from clusters in a ClusterSet."""

    crd = CRDInfo(
        group=MCS_GROUP,
        version=MCS_VERSION,
        older_versions=MCS_OLDER_VERSIONS,
        kind="ServiceImport",
        plural="serviceimports",
        short_names=("svcim", "svcimport"),
        printer_columns=(
            PrinterColumn("Type", "string", ".spec.type", "The type of this ServiceImport"),
            PrinterColumn("IP", "string", ".spec.ips", "The VIP for this ServiceImport"),
            AGE_COLUMN,
        ),
    )

    spec: ServiceImportSpec
    status: ServiceImportStatus = Field(default_factory=ServiceImportStatus)


# --- ClusterSet IP CIDRs (dual-stack) -----------------------------------------------------------

_IPV6_CIDR_SHAPE = r"[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*/(12[0-8]|1[01][0-9]|[1-9]?[0-9])"
ClustersetCIDR = Annotated[
    str, Field(pattern=rf"^(?:{IPV4_CIDR_PATTERN[1:-1]}|{_IPV6_CIDR_SHAPE})$")
]
"""An IPv4 or IPv6 CIDR. The schema only checks the shape (the apiserver has no CIDR format); the
models' validators below parse it, as kube's validation does for Service CIDRs."""


def cidr_family(cidr: str) -> IPFamily | None:
    """The family of a CIDR (host bits tolerated), None when it does not parse."""
    try:
        return "IPv6" if ipaddress.ip_network(cidr.strip(), strict=False).version == 6 else "IPv4"
    except (ValueError, AttributeError):
        return None


def ip_family(ip: str) -> IPFamily | None:
    """The family of an IP address, None when it does not parse."""
    try:
        return "IPv6" if ipaddress.ip_address(ip.strip()).version == 6 else "IPv4"
    except (ValueError, AttributeError):
        return None


def cidr_list_errors(path: str, cidrs: Sequence[str], *, canonical: bool, one_per_family: bool) -> list[str]:
    """Kube-style messages (`<path>[i]: Invalid value: "<v>": <why>`) for a list of ClusterSet IP CIDRs.

    Pure, so the CLI flags and the models share one wording. `canonical` rejects host bits (a cluster's
    block is allocated from address by address; a typo there would silently shift it); `one_per_family`
    is the cluster rule: a cluster has one VIP block per family, as a dual-stack Service has one IP per
    family.
    """
    errors: list[str] = []
    seen: dict[int, int] = {}
    for i, text in enumerate(cidrs):
        where = f'{path}[{i}]: Invalid value: "{text}"'
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            errors.append(f"{where}: must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")
            continue
        if "/" not in text:
            errors.append(f"{where}: must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")
            continue
        if canonical and str(net) != text:
            errors.append(f'{where}: must be in canonical form ("{net}")')
            continue
        if net.version == 6 and net.prefixlen > 126:
            errors.append(f"{where}: an IPv6 prefix length must be at most /126 (a block of at least 4 VIPs)")
            continue
        if one_per_family and net.version in seen:
            first = seen[net.version]
            errors.append(
                f"{where}: may specify no more than one CIDR for each IP family "
                f'({path}[{first}] is "{cidrs[first]}"), i.e 243.1.0.0/16 and fd00:243:0:1::/64'
            )
            continue
        seen.setdefault(net.version, i)
    return errors


def ip_list_errors(path: str, ips: Sequence[str]) -> list[str]:
    """Kube-style messages for a list of IPs with at most one per family (Service spec.clusterIPs)."""
    errors: list[str] = []
    seen: dict[int, int] = {}
    for i, text in enumerate(ips):
        where = f'{path}[{i}]: Invalid value: "{text}"'
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            errors.append(f"{where}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")
            continue
        if ip.version in seen:
            errors.append(f"{where}: may specify no more than one IP for each IP family")
            continue
        seen[ip.version] = i
    return errors


def _checked(path: str, check: Any) -> Any:
    def run(values: list[str] | None) -> list[str] | None:
        if values:
            errors = check(path, values)
            if errors:
                raise ValueError("; ".join(errors))
        return values

    return AfterValidator(run)


def _cluster_cidrs(path: str) -> Any:
    return _checked(path, lambda p, v: cidr_list_errors(p, v, canonical=True, one_per_family=True))


def _range_cidrs(path: str) -> Any:
    # The range only bounds the blocks (host bits tolerated, as ever) and may hold several ranges of a
    # family: brokers deployed before dual-stack have them, and they must stay valid unchanged.
    return _checked(path, lambda p, v: cidr_list_errors(p, v, canonical=False, one_per_family=False))


# --- Isthmus broker objects ---------------------------------------------------------------------


class BrokerSpec(KubeModel):
    """Clusterset-wide settings recorded by `isthmus deploy-broker`."""

    clusterset_ip_enabled: bool = Field(default=False, alias="clustersetIPEnabled")
    """Default for clusters that do not choose: export services with a ClusterSet IP (VIP)."""
    clusterset_ip_cidr_range: Annotated[list[ClustersetCIDR], _range_cidrs("spec.clustersetIPCIDRRange")] = Field(
        default_factory=lambda: [DEFAULT_CLUSTERSET_IP_CIDR_RANGE],
        alias="clustersetIPCIDRRange",
        min_length=1,
    )
    """The clusterset's VIP range; each cluster gets a block of it. Set even when VIPs are off by default."""


class BrokerStatus(KubeModel):
    conditions: Conditions = Field(default_factory=list)


class Broker(Resource):
    """Broker holds the clusterset settings; one per broker namespace, named `broker`."""

    crd = CRDInfo(
        group=ISTHMUS_GROUP,
        version=ISTHMUS_VERSION,
        kind="Broker",
        plural="brokers",
        categories=("isthmus",),
        printer_columns=(
            PrinterColumn("ClustersetIP", "boolean", ".spec.clustersetIPEnabled"),
            PrinterColumn("Range", "string", ".spec.clustersetIPCIDRRange"),
            AGE_COLUMN,
        ),
    )

    spec: BrokerSpec = Field(default_factory=BrokerSpec)
    status: BrokerStatus = Field(default_factory=BrokerStatus)


class ClusterSpec(KubeModel):
    """A member cluster, registered on the broker by `isthmus join`."""

    cluster_id: DNS1123Label = Field(alias="clusterID")
    """The cluster ID: a DNS-1123 label, unique in the clusterset (also the object's name)."""
    clusterset_ip_cidr: Annotated[list[ClustersetCIDR], _cluster_cidrs("spec.clustersetIPCIDR")] = Field(
        default_factory=list, alias="clustersetIPCIDR", max_length=2
    )
    """This cluster's VIP block(s) inside the broker's range; never overlapping another cluster's."""
    clusterset_ip_enabled: bool | None = Field(default=None, alias="clustersetIPEnabled")
    """This cluster's default for exports without the annotation; unset → the broker's setting."""
    joined_at: Time | None = None
    """When the cluster joined."""


class ClusterStatusInfo(KubeModel):
    conditions: Conditions = Field(default_factory=list)


class Cluster(Resource):
    """Cluster is a member of the clusterset, as the broker knows it (name = cluster ID)."""

    crd = CRDInfo(
        group=ISTHMUS_GROUP,
        version=ISTHMUS_VERSION,
        kind="Cluster",
        plural="clusters",
        categories=("isthmus",),
        printer_columns=(
            PrinterColumn("CIDR", "string", ".spec.clustersetIPCIDR"),
            PrinterColumn("ClustersetIP", "boolean", ".spec.clustersetIPEnabled"),
            PrinterColumn("Joined", "date", ".spec.joinedAt"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn("Reason", "string", '.status.conditions[?(@.type=="Ready")].reason'),
            AGE_COLUMN,
        ),
    )

    spec: ClusterSpec
    status: ClusterStatusInfo = Field(default_factory=ClusterStatusInfo)


class ServiceDiscoverySpec(KubeModel):
    """Discovery settings of one member cluster (Submariner's SubmarinerDiscoverySpec), written by join.

    Submariner's Go tag for clustersetIPCIDR is misspelt `clusterserIpCidr`; we use the intended name.
    """

    cluster_id: DNS1123Label = Field(alias="clusterID")
    """This cluster's ID in the clusterset."""
    clusterset_ip_enabled: bool = Field(default=False, alias="clustersetIPEnabled")
    """Export services with a VIP unless their ServiceExport's annotation says otherwise."""
    clusterset_ip_cidr: Annotated[list[ClustersetCIDR], _cluster_cidrs("spec.clustersetIPCIDR")] = Field(
        default_factory=list, alias="clustersetIPCIDR", max_length=2
    )
    """The VIP block(s) this cluster allocates from."""
    broker_namespace: str = DEFAULT_BROKER_NAMESPACE
    """The namespace on the broker API holding the clusterset's objects."""
    clusterset_domain: str = CLUSTERSET_DOMAIN
    """DNS zone answered for multi-cluster services."""


class ServiceDiscoveryStatus(KubeModel):
    conditions: Conditions = Field(default_factory=list)


class ServiceDiscovery(Resource):
    """ServiceDiscovery configures the discovery agent of this cluster (namespaced, in Isthmus's namespace)."""

    crd = CRDInfo(
        group=ISTHMUS_GROUP,
        version=ISTHMUS_VERSION,
        kind="ServiceDiscovery",
        plural="servicediscoveries",
        categories=("isthmus",),
        printer_columns=(
            PrinterColumn("Cluster", "string", ".spec.clusterID"),
            PrinterColumn("ClustersetIP", "boolean", ".spec.clustersetIPEnabled"),
            PrinterColumn("CIDR", "string", ".spec.clustersetIPCIDR"),
            AGE_COLUMN,
        ),
    )

    spec: ServiceDiscoverySpec
    status: ServiceDiscoveryStatus = Field(default_factory=ServiceDiscoveryStatus)


class ExportedServiceSpec(KubeModel):
    """One cluster's view of one exported service, as its agent publishes it to the broker
    (docs/discovery.md, object flow). Every agent aggregates these into the ServiceImport
    and computes conflicts from them (oldest `exportCreationTimestamp`, then cluster ID, wins)."""

    model_config = ConfigDict(
        json_schema_extra={
            "required": [
                "cluster",
                "serviceName",
                "serviceNamespace",
                "type",
                "ports",
                "exportCreationTimestamp",
            ]
        }
    )

    cluster: DNS1123Label
    """The exporting cluster's ID."""
    service_name: str = Field(min_length=1, max_length=63)
    """Name of the exported Service (and ServiceExport)."""
    service_namespace: DNS1123Label
    """Namespace of the exported Service."""
    type: ServiceImportType
    """ClusterSetIP (ClusterIP, NodePort, LoadBalancer services) or Headless (clusterIP: None)."""
    ports: list[ServicePort] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    """The Service's ports."""
    session_affinity: SessionAffinity | None = None
    session_affinity_config: SessionAffinityConfig | None = None
    ip_families: list[IPFamily] | None = Field(default=None, max_length=2)
    internal_traffic_policy: TrafficPolicy | None = None
    traffic_distribution: str | None = None
    clusterset_ip_enabled: bool = Field(default=False, alias="clustersetIPEnabled")
    """The VIP setting this export asks for (annotation, else cluster, else broker setting)."""
    export_creation_timestamp: Time
    """creationTimestamp of the ServiceExport: orders exporters for conflict resolution."""
    exported_labels: StringMap | None = None
    exported_annotations: StringMap | None = None
    consumer_clusters: list[str] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)
    """The clusters that may import this cluster's export (ServiceExport annotation
    isthmus.io/consumer-clusters); absent: every cluster."""
    clusterset_ips: Annotated[list[str] | None, _checked("spec.clustersetIPs", ip_list_errors)] = Field(
        default=None, alias="clustersetIPs", max_length=2, json_schema_extra=ATOMIC_LIST
    )
    """The service's ClusterSet IPs as this cluster holds them (docs/discovery.md "ClusterSet IP"): one
    per family (allocated from this cluster's CIDRs, or adopted from the oldest exporter that holds
    them), `[]` (the service has none), absent (not decided yet). Every reader derives the service's
    VIPs from these."""
    clusterset_ip_allocated_by: str | None = Field(default=None, alias="clustersetIPAllocatedBy")
    """The cluster whose CIDR `clustersetIPs` came from (the ServiceImport's allocated-by annotation)."""


class ExportedServiceStatus(KubeModel):
    conditions: Conditions = Field(default_factory=list)


class ExportedService(Resource):
    """ExportedService is a member cluster's export of a Service, published in the broker namespace.

    Named by `broker_object_name(service, namespace, cluster)` and labelled with SERVICE_NAME_LABEL,
    SOURCE_NAMESPACE_LABEL and SOURCE_CLUSTER_LABEL so agents can select one service's exports.
    """

    crd = CRDInfo(
        group=ISTHMUS_GROUP,
        version=ISTHMUS_VERSION,
        kind="ExportedService",
        plural="exportedservices",
        short_names=("expsvc",),
        categories=("isthmus",),
        printer_columns=(
            PrinterColumn("Cluster", "string", ".spec.cluster"),
            PrinterColumn("Service", "string", ".spec.serviceName"),
            PrinterColumn("Namespace", "string", ".spec.serviceNamespace"),
            PrinterColumn("Type", "string", ".spec.type"),
            PrinterColumn("Exported", "date", ".spec.exportCreationTimestamp"),
        ),
    )

    spec: ExportedServiceSpec
    status: ExportedServiceStatus = Field(default_factory=ExportedServiceStatus)


def mcs_service_name(labels: Mapping[str, str]) -> str | None:
    """The service an EndpointSlice made for multi-cluster use belongs to (kube's own slices, which
    carry kubernetes.io/service-name, never count)."""
    svc = labels.get(SERVICE_NAME_LABEL)
    return svc if svc and KUBE_SERVICE_NAME_LABEL not in labels else None


def kube_service_name(labels: Mapping[str, str]) -> str | None:
    """The Service one of kube's own EndpointSlices belongs to."""
    return labels.get(KUBE_SERVICE_NAME_LABEL) or None


@functools.lru_cache(maxsize=4096)  # a reconcile names a service's objects a dozen times over
def broker_object_name(service: str, namespace: str, cluster: str | None = None) -> str:
    """A broker-namespace object name for a service (and cluster) that cannot collide.

    `<svc>-<ns>` alone collides (`a-b`/`c` vs `a`/`b-c`), so a short hash of the unambiguous
    `<ns>/<svc>[/<cluster>]` is appended. Fits 253 chars (a DNS-1123 subdomain) for any valid input.
    """
    key = f"{namespace}/{service}" + (f"/{cluster}" if cluster else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    parts = [service, namespace] + ([cluster] if cluster else []) + [digest]
    return "-".join(parts)


MCS_MODELS: tuple[type[Resource], ...] = (
    ServiceExport,
    ServiceImport,
    Broker,
    Cluster,
    ServiceDiscovery,
    ExportedService,
)
"""Every CRD of the discovery capability."""
