"""Egress capability API (`egress.isthmus.io/v1alpha1`): Submariner's ExternalService proposal
finished as docs/egress.md describes — SourceIPClass (admin), SourceIPClaim (user), SourceIP (the
binding, PersistentVolume-style), ExternalService (user), and the internal Forwarder and Gateway
objects the operator writes for the data plane — plus every well-known name of the capability.

The seed's examples use `submariner.io`; Submariner owns that group (with a `Gateway` kind of its
own), so a clusterset running both would clash: hence our own group.
"""

from __future__ import annotations

import hashlib
import ipaddress
from enum import StrEnum

from pydantic import Field

from isthmus.api.base import (
    AGE_COLUMN,
    ATOMIC_LIST,
    Conditions,
    CRDInfo,
    Int32,
    KubeModel,
    PrinterColumn,
    Resource,
    Time,
)

GROUP = "egress.isthmus.io"
VERSION = "v1alpha1"

OPERATOR_NAMESPACE = "isthmus-system"
"""Where the Forwarder and Gateway objects, the gateway's Service and every Lease live: a
namespace users cannot write (the seed's security note)."""
FORWARDER_NAMESPACE = "external-services"
"""Where each ExternalService's forwarder Service is published (`<name>.external-services`, the seed's
name): a Service without selector whose EndpointSlice the operator keeps from the forwarder pods,
which run in the operator's namespace. Nothing else lives there, so an install that moves Isthmus's
namespace (a kustomize `namespace:` overlay) moves every workload and account with it."""

OPERATOR_FIELD_MANAGER = "isthmus-egress-operator"
GATEWAY_FIELD_MANAGER = "isthmus-egress-gateway"
FORWARDER_FIELD_MANAGER = "isthmus-egress-forwarder"
OPERATOR_LEASE = "isthmus-egress-operator"
GATEWAY_LEASE = "isthmus-egress-gateway"
GATEWAY_SERVICE = "isthmus-egress-gateway"
"""Service of the gateway replicas. It selects the pods of the gateway's Deployment that carry
GATEWAY_LEADER_LABEL, so its endpoints name the leader while both replicas are ready (healthy)."""
GATEWAY_APP_LABEL = "app.kubernetes.io/name"
GATEWAY_APP = "isthmus-egress-gateway"
"""The gateway Deployment's pods carry `app.kubernetes.io/name: isthmus-egress-gateway`."""
GATEWAY_LEADER_LABEL = "egress.isthmus.io/leader"
"""Set to "true" by the leading gateway on its own Pod once it has programmed its rules, removed when
it steps down (and from any other gateway Pod by a new leader): Patroni's "label the leader" pattern,
so readiness can mean healthy and a Deployment of two replicas is Available."""
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
"""kube's ReplicaSet controller removes Pods of lower cost first: the leader sets a cost on its Pod so a
rolling update replaces the standby before it, and leadership moves once per upgrade, not twice."""
LEADER_DELETION_COST = "1"
FORWARDER_SERVICE_ACCOUNT = "isthmus-egress-forwarder"

GATEWAY_RELAY_PORT = 15470
"""Where the leading gateway accepts TCP relays from forwarders (egress)."""
GATEWAY_UDP_RELAY_PORT = 15473
"""Where the leading gateway accepts UDP relays (datagrams framed over TCP) from forwarders."""
FORWARDER_RELAY_PORT = 15471
"""Where a forwarder accepts relays from the gateway (ingress); named `isthmus-relay` on its Service."""
FORWARDER_RELAY_PORT_NAME = "isthmus-relay"
FORWARDER_HEALTH_PORT = 15472
SLICE_MANAGED_BY = "egress.isthmus.io"
"""endpointslice.kubernetes.io/managed-by of the slices the operator writes in `external-services`."""

CLAIM_FINALIZER = "egress.isthmus.io/claim-protection"
"""On every SourceIPClaim: held while an ExternalService names the claim (kube's pvc-protection)."""
SOURCE_IP_FINALIZER = "egress.isthmus.io/sourceip-protection"
"""On a SourceIP while it is bound to a claim (kube's pv-protection)."""
EXTERNAL_SERVICE_FINALIZER = "egress.isthmus.io/external-service"
"""On an ExternalService: its forwarder (another namespace) and data-plane objects go first."""

CLASS_LABEL = "egress.isthmus.io/class"
"""On a SourceIP: its class."""
ES_NAMESPACE_LABEL = "egress.isthmus.io/external-service-namespace"
ES_NAME_LABEL = "egress.isthmus.io/external-service"
"""On every object the operator makes for an ExternalService (forwarder Deployment, Service,
Forwarder, Gateway): whose it is."""
FORWARDER_POD_LABEL = "egress.isthmus.io/forwarder"
"""On forwarder pods: the Forwarder object they serve (`<ns>.<name>`)."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "isthmus-egress"

READY = "Ready"


class ReclaimPolicy(StrEnum):
    RETAIN = "Retain"
    DELETE = "Delete"


class ClaimPhase(StrEnum):
    PENDING = "Pending"
    BOUND = "Bound"
    LOST = "Lost"


class SourceIPPhase(StrEnum):
    AVAILABLE = "Available"
    BOUND = "Bound"
    RELEASED = "Released"
    FAILED = "Failed"


class Reason(StrEnum):
    """Condition and Event reasons of the capability."""

    BOUND = "Bound"
    CLASS_NOT_FOUND = "ClassNotFound"
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
    ADDRESS_NOT_IN_CLASS = "AddressNotInClass"
    ADDRESS_IN_USE = "AddressInUse"
    CLASS_EXHAUSTED = "ClassExhausted"
    SOURCE_IP_LOST = "SourceIPLost"
    AVAILABLE = "Available"
    RELEASED = "Released"
    RECLAIMED = "Reclaimed"
    VALID = "Valid"
    INVALID_RANGES = "InvalidRanges"
    RANGES_OVERLAP = "RangesOverlap"
    CLAIM_NOT_FOUND = "ClaimNotFound"
    CLAIM_NOT_BOUND = "ClaimNotBound"
    SERVICE_NOT_FOUND = "ServiceNotFound"
    NAME_IN_USE = "ForwarderNameInUse"
    FORWARDER_NOT_READY = "ForwarderNotReady"
    GATEWAY_NOT_READY = "GatewayNotReady"
    NO_GATEWAY = "NoGatewayLeader"
    PROGRAMMED = "Programmed"
    BIND_FAILED = "BindFailed"
    SOURCE_NOT_CLAIMED = "SourceNotClaimed"
    READY = "Ready"


# --- SourceIPClass --------------------------------------------------------------------------------


class AddressRange(KubeModel):
    start: str
    """First address of the range (inclusive)."""
    end: str
    """Last address of the range (inclusive); same family as start, not below it."""


class SourceIPClassSpec(KubeModel):
    ranges: list[AddressRange] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    """The addresses this class hands out."""
    allowed_namespaces: list[str] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    """Namespaces whose claims may use this class; empty: none (fail closed)."""
    reclaim_policy: ReclaimPolicy = ReclaimPolicy.DELETE
    """What happens to a SourceIP whose claim is gone: Delete frees the address, Retain keeps it
    Released until an admin deletes it (or clears its claimRef to make it Available)."""


class SourceIPClassStatus(KubeModel):
    capacity: int | None = None
    """Addresses in the ranges."""
    allocated: int | None = None
    """SourceIPs of the class that exist (any phase)."""
    conditions: Conditions = Field(default_factory=list)


class SourceIPClass(Resource):
    """An admin's pool of source addresses, and who may claim from it."""

    crd = CRDInfo(
        group=GROUP, version=VERSION, kind="SourceIPClass", plural="sourceipclasses", scope="Cluster",
        short_names=("sipclass",), categories=("isthmus", "egress"),
        printer_columns=(
            PrinterColumn("Allocated", "integer", ".status.allocated", "SourceIPs of the class"),
            PrinterColumn("Capacity", "integer", ".status.capacity", "Addresses in the ranges"),
            PrinterColumn("Reclaim", "string", ".spec.reclaimPolicy", "Reclaim policy"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            AGE_COLUMN,
        ),
    )
    spec: SourceIPClassSpec = Field(default_factory=SourceIPClassSpec)
    status: SourceIPClassStatus = Field(default_factory=SourceIPClassStatus)


# --- SourceIPClaim --------------------------------------------------------------------------------


class SourceIPClaimSpec(KubeModel):
    source_ip_class_name: str = Field(alias="sourceIPClassName")
    """The class to draw the address from."""
    source_ip: str | None = Field(default=None, alias="sourceIP")
    """A specific address of the class; empty: any free one."""


class SourceIPClaimStatus(KubeModel):
    phase: ClaimPhase | None = None
    source_ip: str | None = Field(default=None, alias="sourceIP")
    """The bound address."""
    conditions: Conditions = Field(default_factory=list)


class SourceIPClaim(Resource):
    """A user's request for one static source address."""

    crd = CRDInfo(
        group=GROUP, version=VERSION, kind="SourceIPClaim", plural="sourceipclaims",
        short_names=("sipclaim",), categories=("isthmus", "egress"),
        printer_columns=(
            PrinterColumn("Class", "string", ".spec.sourceIPClassName"),
            PrinterColumn("Phase", "string", ".status.phase"),
            PrinterColumn("SourceIP", "string", ".status.sourceIP"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            AGE_COLUMN,
        ),
    )
    spec: SourceIPClaimSpec
    status: SourceIPClaimStatus = Field(default_factory=SourceIPClaimStatus)


# --- SourceIP -------------------------------------------------------------------------------------


class ClaimRef(KubeModel):
    namespace: str
    name: str
    uid: str
    """The claim's UID: a claim re-created under the same name is another claim."""


class SourceIPSpec(KubeModel):
    source_ip: str = Field(alias="sourceIP")
    source_ip_class_name: str = Field(alias="sourceIPClassName")
    claim_ref: ClaimRef | None = None
    """The claim this address is bound to; empty: Available."""
    reclaim_policy: ReclaimPolicy = ReclaimPolicy.DELETE
    """The class's policy when the address was bound (kept here, as a PersistentVolume keeps its own)."""


class SourceIPStatus(KubeModel):
    phase: SourceIPPhase | None = None
    conditions: Conditions = Field(default_factory=list)


class SourceIP(Resource):
    """One address of a class, named by its canonical form so the API server's name uniqueness
    makes a double allocation impossible."""

    crd = CRDInfo(
        group=GROUP, version=VERSION, kind="SourceIP", plural="sourceips", scope="Cluster",
        short_names=("sip",), categories=("isthmus", "egress"),
        printer_columns=(
            PrinterColumn("SourceIP", "string", ".spec.sourceIP"),
            PrinterColumn("Class", "string", ".spec.sourceIPClassName"),
            PrinterColumn("Claim-Namespace", "string", ".spec.claimRef.namespace", priority=1),
            PrinterColumn("Claim", "string", ".spec.claimRef.name"),
            PrinterColumn("Phase", "string", ".status.phase"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            AGE_COLUMN,
        ),
    )
    spec: SourceIPSpec
    status: SourceIPStatus = Field(default_factory=SourceIPStatus)


# --- ExternalService ------------------------------------------------------------------------------


class ServiceRef(KubeModel):
    namespace: str | None = None
    """Default: the ExternalService's namespace."""
    name: str


class Source(KubeModel):
    service: ServiceRef
    """Pods of this Service use the ExternalService."""
    source_ip_claim_name: str | None = Field(default=None, alias="sourceIPClaimName")
    """A SourceIPClaim of the ExternalService's namespace: the address these pods appear from."""
    source_ip: str | None = Field(default=None, alias="sourceIP")
    """Not allowed (the seed's first draft): a user may not pick a source address; use a claim."""


class ServicePort(KubeModel):
    """corev1.ServicePort as the seed uses it: the forwarder listens on targetPort, the outside
    server is reached on port."""

    name: str | None = None
    protocol: str = "TCP"
    port: Int32
    target_port: Int32 | None = None
    """Default: port."""

    @property
    def listen_port(self) -> int:
        return self.target_port or self.port


class ExternalServiceSpec(KubeModel):
    target_ip: str = Field(alias="targetIP")
    """The outside server."""
    sources: list[Source] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    ports: list[ServicePort] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)


class SourceStatus(KubeModel):
    service: str
    """`<namespace>/<name>` of the source Service."""
    claim: str | None = None
    source_ip: str | None = Field(default=None, alias="sourceIP")
    endpoints: int | None = None
    """Ready pod addresses of the service the forwarder accepts."""


class ExternalServiceStatus(KubeModel):
    conditions: Conditions = Field(default_factory=list)
    sources: list[SourceStatus] | None = Field(default=None, json_schema_extra=ATOMIC_LIST)
    address: str | None = None
    """`<name>.external-services`: what the source pods connect to."""
    source_ips: str | None = Field(default=None, alias="sourceIPs")
    """The bound source addresses, comma-separated (printer column)."""
    forwarder: str | None = None
    """`<namespace>/<name>` of the forwarder Deployment."""
    observed_generation: int | None = None


class ExternalService(Resource):
    """Pods of the source services reach targetIP with their claim's address; targetIP reaches
    them back on `sourceIP:port`."""

    crd = CRDInfo(
        group=GROUP, version=VERSION, kind="ExternalService", plural="externalservices",
        short_names=("extsvc",), categories=("isthmus", "egress"),
        printer_columns=(
            PrinterColumn("Target", "string", ".spec.targetIP"),
            PrinterColumn("SourceIPs", "string", ".status.sourceIPs"),
            PrinterColumn("Address", "string", ".status.address"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            AGE_COLUMN,
        ),
    )
    spec: ExternalServiceSpec
    status: ExternalServiceStatus = Field(default_factory=ExternalServiceStatus)


# --- internal: Forwarder and Gateway (the seed's ForwarderSpec / GatewaySpec) ---------------------


class ObjectRef(KubeModel):
    namespace: str | None = None
    name: str


class ForwarderRule(KubeModel):
    protocol: str = "TCP"
    source_ip: str = Field(alias="sourceIP")
    target_port: Int32
    """Egress: the forwarder's listening port. Ingress: the port on sourceIP the gateway listens on."""
    destination_ip: str = Field(alias="destinationIP")
    """Egress: targetIP. Ingress: the source Service's ClusterIP."""
    destination_port: Int32
    service: str | None = None
    """`<ns>/<name>` of the source Service."""
    client_ips: list[str] = Field(default_factory=list, alias="clientIPs", json_schema_extra=ATOMIC_LIST)
    """Egress: ready pod addresses of the source Service, the only clients accepted."""
    gateway: ObjectRef | None = None


class ForwarderSpec(KubeModel):
    egress_rules: list[ForwarderRule] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    ingress_rules: list[ForwarderRule] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    gateway_address: str | None = None
    """`host:port` of the gateway's relay (its Service)."""
    gateway_ips: list[str] = Field(default_factory=list, alias="gatewayIPs", json_schema_extra=ATOMIC_LIST)
    """Addresses the gateway relays ingress from: the only peers accepted on the relay port."""


class ForwarderStatus(KubeModel):
    conditions: Conditions = Field(default_factory=list)
    observed_generation: int | None = None
    refused: int | None = None
    """Client connections refused so far (not pods of a source service)."""


class Forwarder(Resource):
    """Internal: what one ExternalService's forwarder pods do."""

    crd = CRDInfo(
        group=GROUP, version=VERSION, kind="Forwarder", plural="forwarders", categories=("isthmus",),
        printer_columns=(
            PrinterColumn("Gateway", "string", ".spec.gatewayAddress"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            AGE_COLUMN,
        ),
    )
    spec: ForwarderSpec = Field(default_factory=ForwarderSpec)
    status: ForwarderStatus = Field(default_factory=ForwarderStatus)


class GatewayRule(KubeModel):
    protocol: str = "TCP"
    source_ip: str = Field(alias="sourceIP")
    target_port: Int32 | None = None
    """Ingress: the port on sourceIP the gateway listens on."""
    destination_ip: str = Field(alias="destinationIP")
    """Egress: targetIP. Ingress: the source Service's ClusterIP (kernel mode's DNAT target)."""
    destination_port: Int32
    peer_ip: str | None = Field(default=None, alias="peerIP")
    """Ingress: the only peer accepted (targetIP)."""
    service: str | None = None
    forwarder: ObjectRef | None = None
    forwarder_ips: list[str] = Field(default_factory=list, alias="forwarderIPs", json_schema_extra=ATOMIC_LIST)
    """Egress: the forwarder pods' addresses, the only relays accepted."""
    client_ips: list[str] = Field(default_factory=list, alias="clientIPs", json_schema_extra=ATOMIC_LIST)
    """Egress: the source pods' addresses (kernel mode matches them directly)."""
    forwarder_address: str | None = None
    """Ingress: `host:port` of the forwarder's relay."""


class GatewaySpec(KubeModel):
    external_service: ObjectRef
    """The ExternalService these rules come from (the gateway checks its claims' bindings)."""
    egress_rules: list[GatewayRule] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)
    ingress_rules: list[GatewayRule] = Field(default_factory=list, json_schema_extra=ATOMIC_LIST)


class GatewayStatus(KubeModel):
    conditions: Conditions = Field(default_factory=list)
    observed_generation: int | None = None
    holder: str | None = None
    """The gateway replica that programmed these rules."""
    last_programmed_time: Time | None = None


class Gateway(Resource):
    """Internal: what the gateway does for one ExternalService."""

    crd = CRDInfo(
        group=GROUP, version=VERSION, kind="Gateway", plural="gateways", categories=("isthmus",),
        short_names=("egw",),
        printer_columns=(
            PrinterColumn("Holder", "string", ".status.holder"),
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            AGE_COLUMN,
        ),
    )
    spec: GatewaySpec
    status: GatewayStatus = Field(default_factory=GatewayStatus)


EGRESS_MODELS: tuple[type[Resource], ...] = (SourceIPClass, SourceIPClaim, SourceIP, ExternalService, Forwarder,
                                             Gateway)

# --- naming ---------------------------------------------------------------------------------------


def canonical_ip(value: str) -> str:
    """The address in canonical form (ValueError when it is not one)."""
    return str(ipaddress.ip_address(value.strip()))


def source_ip_name(address: str) -> str:
    """The SourceIP object's name: the canonical IPv4 address, or the exploded IPv6 one with `-`
    for `:` (a valid object name that starts with a hex digit)."""
    ip = ipaddress.ip_address(address)
    return str(ip) if ip.version == 4 else ip.exploded.replace(":", "-")


def dataplane_name(namespace: str, name: str) -> str:
    """Name of the Forwarder and Gateway objects of an ExternalService: `<ns>.<name>`. A namespace
    has no dot, so two ExternalServices never share it (`<ns>-<name>` would: a-b/c and a/b-c)."""
    return f"{namespace}.{name}"


def forwarder_workload_name(namespace: str, name: str) -> str:
    """The forwarder Deployment's (and its Service's) name in the operator's namespace: readable and
    unique (a hash of `<ns>/<name>`: names of two namespaces may not share it), within 63 characters."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    return f"egress-{name[:40]}-{digest}"


def split_dataplane_name(value: str) -> tuple[str, str]:
    ns, _, name = value.partition(".")
    return ns, name
