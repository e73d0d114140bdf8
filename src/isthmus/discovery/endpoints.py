"""Translation between a member cluster's own objects and what it publishes to / imports from the broker.

Pure functions over lightkube models (Service, EndpointSlice) and our pydantic models, following
docs/discovery.md: validation of an export ("ServiceExport conditions"), the cluster's view of a
service (ExportedServiceSpec), its broker EndpointSlice ("EndpointSlice content"), the copies placed
next to the local ServiceImport, and the local ServiceImport itself.

Where the exported labels/annotations go (decided here, used by both directions): the aggregated
ServiceImport every agent derives (never stored on the broker: docs/discovery.md "Broker tenancy")
carries them as its own metadata labels/annotations, beside the broker bookkeeping labels
(SERVICE_NAME_LABEL, SOURCE_NAMESPACE_LABEL, which win a key clash) and the two lighthouse
annotations. `broker_service_import` builds that form and `local_service_import` turns it into the
member-cluster copy (bookkeeping labels stripped).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from lightkube.models.discovery_v1 import Endpoint, EndpointConditions, EndpointPort
from lightkube.models.meta_v1 import ObjectMeta as KubeObjectMeta
from lightkube.models.meta_v1 import OwnerReference as KubeOwnerReference
from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.base import ObjectMeta
from isthmus.api.mcs import (
    CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION,
    CONSUMER_CLUSTERS_ANNOTATION,
    EXPORTED_PORTS_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    USE_CLUSTERSET_IP_ANNOTATION,
    ClientIPConfig,
    ClusterStatus,
    ExportedServiceSpec,
    IPFamily,
    Protocol,
    ServiceImport,
    ServiceImportStatus,
    ServiceImportType,
    ServicePort,
    SessionAffinity,
    SessionAffinityConfig,
    TrafficPolicy,
    ValidReason,
    broker_object_name,
)
from isthmus.discovery.aggregate import Aggregate
from isthmus.kube.endpointslices import endpoint_ready, own_slices, pod_endpoints

__all__ = [
    "BROKER_ONLY_LABELS",
    "InvalidAnnotation",
    "broker_import_metadata",
    "broker_service_import",
    "broker_slice",
    "consumer_clusters",
    "export_view",
    "exported_ports",
    "imported_slice_name",
    "local_import_metadata",
    "local_service_import",
    "local_slice_copy",
    "validate_export",
    "vip_setting",
]

BROKER_ONLY_LABELS: frozenset[str] = frozenset({SERVICE_NAME_LABEL, SOURCE_NAMESPACE_LABEL})
"""Labels the broker aggregate carries for selection; not part of the member-cluster copy."""

_PROTOCOLS: frozenset[str] = frozenset({"TCP", "UDP", "SCTP"})

# --- VIP setting and validation ----------------------------------------------------------------


class InvalidAnnotation(ValueError):
    """The use-clusterset-ip annotation has a value other than true/false, or the exported-ports /
    consumer-clusters annotation is malformed (→ Valid=False InvalidAnnotation)."""


PortSelector = tuple[str | None, int]
"""One entry of the exported-ports annotation: (port name or None, port number)."""


def exported_ports(export_annotations: dict[str, str] | None) -> list[PortSelector] | None:
    """The exported-ports annotation parsed (None: every port). `80,https:443`: port 80 whatever
    its name, and the port named https if its number is 443."""
    raw = (export_annotations or {}).get(EXPORTED_PORTS_ANNOTATION)
    if raw is None:
        return None
    out: list[PortSelector] = []
    for item in raw.split(","):
        item = item.strip()
        name, _, number = item.rpartition(":")
        # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
        if not (number.isascii() and number.isdigit()) or not 1 <= int(number) <= 65535:
            raise InvalidAnnotation(
                f'annotation {EXPORTED_PORTS_ANNOTATION} has value "{raw}": each entry must be a port '
                '(1-65535) or name:port, comma-separated')
        out.append((name or None, int(number)))
    return out


def consumer_clusters(export_annotations: dict[str, str] | None) -> list[str] | None:
    """The consumer-clusters annotation parsed (None: every cluster; empty: none)."""
    raw = (export_annotations or {}).get(CONSUMER_CLUSTERS_ANNOTATION)
    if raw is None:
        return None
    return sorted({c.strip() for c in raw.split(",") if c.strip()})


def port_selected(selectors: Sequence[PortSelector] | None, name: str | None, number: int | None) -> bool:
    if selectors is None:
        return True
    return any(number == port and (want is None or want == (name or "")) for want, port in selectors)


def vip_setting(export_annotations: dict[str, str] | None, cluster_default: bool) -> bool:
    """Whether an export asks for a VIP: its annotation if present, else the cluster's setting.

    The annotation is "true"/"false", case-insensitive with surrounding whitespace tolerated (what
    users type in YAML); anything else raises InvalidAnnotation quoting the value, never a guess.
    """
    if not export_annotations or USE_CLUSTERSET_IP_ANNOTATION not in export_annotations:
        return cluster_default
    raw = export_annotations[USE_CLUSTERSET_IP_ANNOTATION]
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise InvalidAnnotation(
        f'annotation {USE_CLUSTERSET_IP_ANNOTATION} has value "{raw}": it must be "true" or "false"'
    )


def _is_headless(service: Service) -> bool:
    return service.spec is not None and service.spec.clusterIP == "None"


def validate_export(service: Service | None) -> tuple[bool, str, str, ServiceImportType | None]:
    """(valid, reason, message, type) for the Valid condition of a ServiceExport.

    ClusterIP, NodePort and LoadBalancer (and an unset type) export as ClusterSetIP, as KEP-1645 says
    (Lighthouse rejects the last two); `clusterIP: None` exports as Headless.
    """
    if service is None:
        return (
            False,
            ValidReason.NO_SERVICE,
            "no Service with the ServiceExport's name exists in its namespace",
            None,
        )
    spec = service.spec
    svc_type = (spec.type if spec is not None else None) or "ClusterIP"
    if svc_type == "ExternalName":
        return (
            False,
            ValidReason.INVALID_SERVICE_TYPE,
            "Services of type ExternalName cannot be exported",
            None,
        )
    if _is_headless(service):
        return True, ValidReason.VALID, "the Service is exported as Headless", ServiceImportType.HEADLESS
    return (
        True,
        ValidReason.VALID,
        f"the Service (type {svc_type}) is exported as ClusterSetIP",
        ServiceImportType.CLUSTER_SET_IP,
    )


# --- the cluster's view of a service -----------------------------------------------------------


def export_view(
    cluster_id: str,
    service: Service,
    export_created: datetime,
    exported_labels: dict[str, str] | None,
    exported_annotations: dict[str, str] | None,
    vip_enabled: bool,
    *,
    selectors: Sequence[PortSelector] | None = None,
    consumers: list[str] | None = None,
) -> ExportedServiceSpec:
    """What cluster `cluster_id` publishes about `service` (an ExportedService spec).

    A headless Service has no VIP, so its view never asks for one, whatever `vip_enabled` says.
    Raises ValueError if the Service cannot be exported (see validate_export): callers validate first.
    """
    valid, _, message, svc_type = validate_export(service)
    if not valid or svc_type is None:
        raise ValueError(message)
    spec = service.spec
    meta = service.metadata
    name = meta.name if meta is not None else None
    namespace = meta.namespace if meta is not None else None
    if not name or not namespace:
        raise ValueError("the Service has no metadata.name or metadata.namespace")
    ports = [
        ServicePort(
            name=p.name or None,
            protocol=cast(Protocol, p.protocol or "TCP"),
            app_protocol=p.appProtocol,
            port=p.port,
        )
        for p in (spec.ports if spec is not None else None) or []
        if port_selected(selectors, p.name, p.port)
    ]
    affinity_config: SessionAffinityConfig | None = None
    if spec is not None and spec.sessionAffinityConfig is not None:
        client_ip = spec.sessionAffinityConfig.clientIP
        affinity_config = SessionAffinityConfig(
            client_ip=ClientIPConfig(timeout_seconds=client_ip.timeoutSeconds)
            if client_ip is not None
            else None
        )
    families = [cast(IPFamily, f) for f in (spec.ipFamilies if spec is not None else None) or []]
    return ExportedServiceSpec(
        cluster=cluster_id,
        service_name=name,
        service_namespace=namespace,
        type=svc_type,
        ports=ports,
        session_affinity=cast("SessionAffinity | None", spec.sessionAffinity if spec is not None else None),
        session_affinity_config=affinity_config,
        ip_families=families or None,
        internal_traffic_policy=cast(
            "TrafficPolicy | None", spec.internalTrafficPolicy if spec is not None else None
        ),
        traffic_distribution=spec.trafficDistribution if spec is not None else None,
        clusterset_ip_enabled=vip_enabled and svc_type == ServiceImportType.CLUSTER_SET_IP,
        export_creation_timestamp=export_created,
        exported_labels=dict(exported_labels) if exported_labels else None,
        exported_annotations=dict(exported_annotations) if exported_annotations else None,
        consumer_clusters=consumers,
    )


# --- EndpointSlices ----------------------------------------------------------------------------


def _slice_labels(service: str, cluster: str, namespace: str | None) -> dict[str, str]:
    labels = {
        SERVICE_NAME_LABEL: service,
        SOURCE_CLUSTER_LABEL: cluster,
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
    }
    if namespace is not None:
        labels[SOURCE_NAMESPACE_LABEL] = namespace
    return labels


def _cluster_ip_endpoint(
    service: Service, own: Sequence[EndpointSlice]
) -> tuple[list[Endpoint], list[EndpointPort]]:
    spec = service.spec
    ready = any(endpoint_ready(ep.conditions) for s in own for ep in s.endpoints or [])
    ports = [
        EndpointPort(name=p.name or "", protocol=p.protocol or "TCP", port=p.port, appProtocol=p.appProtocol)
        for p in (spec.ports if spec is not None else None) or []
    ]
    cluster_ip = spec.clusterIP if spec is not None else None
    try:
        ipaddress.IPv4Address(cluster_ip or "")
    except ValueError:
        return [], ports  # no (IPv4) ClusterIP yet, or headless: nothing to publish
    conditions = EndpointConditions(ready=ready, serving=ready, terminating=False)
    return [Endpoint(addresses=[cast(str, cluster_ip)], conditions=conditions)], ports


def broker_slice(
    cluster_id: str,
    namespace: str,
    service: Service,
    slices: Sequence[EndpointSlice],
    use_pod_ips: bool,
    selectors: Sequence[PortSelector] | None = None,
) -> EndpointSlice:
    """Cluster `cluster_id`'s EndpointSlice for the broker (docs/discovery.md "EndpointSlice content").

    `slices` are the cluster's own slices of the Service. With `use_pod_ips` (VIP or headless) every
    endpoint, deduplicated by address (the ready-most copy wins) and sorted by address, with the
    resolved target ports; otherwise one endpoint, the Service's ClusterIP, ready if any endpoint
    is. metadata.namespace is left unset: the caller puts it in the broker namespace.
    """
    name = (service.metadata.name if service.metadata is not None else None) or ""
    if not name:
        raise ValueError("the Service has no metadata.name")
    own = own_slices(name, slices)
    endpoints, slice_ports = pod_endpoints(own) if use_pod_ips else _cluster_ip_endpoint(service, own)
    if selectors is not None:  # only the exported Service ports (slice ports are named as the Service's)
        spec_ports = (service.spec.ports if service.spec is not None else None) or []
        kept = {p.name or "" for p in spec_ports if port_selected(selectors, p.name, p.port)}
        slice_ports = [p for p in slice_ports if (p.name or "") in kept]
    return EndpointSlice(
        metadata=KubeObjectMeta(
            name=broker_object_name(name, namespace, cluster_id),
            labels=_slice_labels(name, cluster_id, namespace),
        ),
        addressType="IPv4",
        endpoints=endpoints,
        ports=slice_ports,
    )


def imported_slice_name(service: str, cluster: str) -> str:
    """Name of cluster `cluster`'s slice copy next to ServiceImport `service` (one namespace).

    `<svc>-<cluster>` alone collides (`a-b`/`c` vs `a`/`b-c`), hence the hash of the unambiguous
    pair; at most 63 + 63 + 12 characters, well inside a DNS-1123 subdomain.
    """
    digest = hashlib.sha256(f"{service}/{cluster}".encode()).hexdigest()[:10]
    return f"{service}-{cluster}-{digest}"


def local_slice_copy(
    broker: EndpointSlice,
    namespace: str,
    service: str,
    cluster: str,
    owner_uid: str,
    owner_name: str,
    *,
    ports: Sequence[EndpointPort] | None = None,
) -> EndpointSlice:
    """The copy of a broker slice placed next to the local ServiceImport, owned by it.

    Same endpoints, ports (or `ports`: those of the import its cluster serves, imports.py) and
    addressType; our labels but never kubernetes.io/service-name, so the
    local kube-proxy and EndpointSlice controller leave it alone; garbage-collected with the import.
    The copy's lists are its own but their items are the broker slice's (the agent only serializes
    it, and its cached objects are read-only): a deep copy per apply was 1.6 % of the agent's CPU.
    """
    return EndpointSlice(
        metadata=KubeObjectMeta(
            name=imported_slice_name(service, cluster),
            namespace=namespace,
            labels=_slice_labels(service, cluster, None),
            ownerReferences=[
                KubeOwnerReference(
                    apiVersion=ServiceImport.crd.api_version,
                    kind=ServiceImport.crd.kind,
                    name=owner_name,
                    uid=owner_uid,
                    controller=True,
                    blockOwnerDeletion=False,
                )
            ],
        ),
        addressType=broker.addressType or "IPv4",
        endpoints=list(broker.endpoints or []),
        ports=list(broker.ports or [] if ports is None else ports),
    )


# --- ServiceImports ----------------------------------------------------------------------------


def broker_import_metadata(agg: Aggregate, *, service: str, namespace: str, vip_enabled: bool,
                           allocated_by: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations of `broker_service_import` (compared before building one)."""
    labels = dict(agg.labels)
    labels.update({SERVICE_NAME_LABEL: service, SOURCE_NAMESPACE_LABEL: namespace})
    annotations = dict(agg.annotations)
    annotations[USE_CLUSTERSET_IP_ANNOTATION] = "true" if vip_enabled else "false"
    annotations.pop(CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION, None)
    if allocated_by and agg.spec.ips:
        annotations[CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION] = allocated_by
    return labels, annotations


def broker_service_import(
    agg: Aggregate,
    *,
    service: str,
    namespace: str,
    vip_enabled: bool,
    allocated_by: str | None,
) -> ServiceImport:
    """The aggregated ServiceImport as every agent derives it (metadata.namespace left to the caller).

    Exported labels/annotations go on its metadata (bookkeeping labels win a clash); the
    use-clusterset-ip annotation records the fixed VIP setting, allocated-by the VIP's cluster.
    """
    labels, annotations = broker_import_metadata(agg, service=service, namespace=namespace,
                                                 vip_enabled=vip_enabled, allocated_by=allocated_by)
    return ServiceImport(
        metadata=ObjectMeta(
            name=broker_object_name(service, namespace), labels=labels, annotations=annotations
        ),
        spec=agg.spec.model_copy(),  # shallow: the aggregate is made per reconcile and only read after
        status=ServiceImportStatus(clusters=[ClusterStatus(cluster=c) for c in agg.clusters]),
    )


def local_import_metadata(broker_import: ServiceImport) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The labels and annotations of `local_service_import` (None when empty; compared before building one)."""
    labels = {k: v for k, v in (broker_import.metadata.labels or {}).items() if k not in BROKER_ONLY_LABELS}
    annotations = dict(broker_import.metadata.annotations or {})
    return labels or None, annotations or None


def local_service_import(broker_import: ServiceImport, *, namespace: str, service: str) -> ServiceImport:
    """The member-cluster copy `<namespace>/<service>` of a broker aggregate.

    Spec and status.clusters copied (conditions are the broker's own business); the two lighthouse
    annotations and the exported labels/annotations become its metadata; the broker bookkeeping
    labels are dropped. No uid/resourceVersion: the caller applies it.
    """
    labels, annotations = local_import_metadata(broker_import)
    return ServiceImport(
        metadata=ObjectMeta(name=service, namespace=namespace, labels=labels, annotations=annotations),
        spec=broker_import.spec.model_copy(),  # shallow: the aggregate is parsed per reconcile, only read after
        status=ServiceImportStatus(
            clusters=[c.model_copy() for c in broker_import.status.clusters],
        ),
    )
