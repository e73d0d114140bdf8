"""Translation of a cluster's objects to what it publishes and imports (isthmus.discovery.endpoints)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from lightkube.models.core_v1 import ClientIPConfig as KubeClientIPConfig
from lightkube.models.core_v1 import ServicePort as KubeServicePort
from lightkube.models.core_v1 import ServiceSpec
from lightkube.models.core_v1 import SessionAffinityConfig as KubeSessionAffinityConfig
from lightkube.models.discovery_v1 import Endpoint, EndpointConditions, EndpointPort
from lightkube.models.meta_v1 import ObjectMeta as KubeObjectMeta
from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import (
    CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION,
    KUBE_SERVICE_NAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    USE_CLUSTERSET_IP_ANNOTATION,
    ClientIPConfig,
    ExportedServiceSpec,
    ServiceImportType,
    ServicePort,
    SessionAffinityConfig,
    ValidReason,
    broker_object_name,
)
from isthmus.discovery.aggregate import Aggregate, aggregate
from isthmus.discovery.endpoints import (
    InvalidAnnotation,
    broker_service_import,
    broker_slice,
    export_view,
    imported_slice_name,
    local_service_import,
    local_slice_copy,
    validate_export,
    vip_setting,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def service(
    name: str = "web",
    namespace: str = "shop",
    *,
    type_: str | None = "ClusterIP",
    cluster_ip: str | None = "10.96.0.10",
    ports: list[KubeServicePort] | None = None,
    **spec: Any,
) -> Service:
    if ports is None:
        ports = [KubeServicePort(name="http", port=80, targetPort="web", protocol="TCP")]
    return Service(
        metadata=KubeObjectMeta(name=name, namespace=namespace),
        spec=ServiceSpec(type=type_, clusterIP=cluster_ip, ports=ports, **spec),
    )


def ep(
    ip: str,
    ready: bool | None = True,
    serving: bool | None = None,
    terminating: bool | None = None,
    **kw: Any,
) -> Endpoint:
    return Endpoint(
        addresses=[ip],
        conditions=EndpointConditions(ready=ready, serving=serving, terminating=terminating),
        **kw,
    )


def eps(
    name: str,
    endpoints: list[Endpoint],
    ports: list[EndpointPort] | None = None,
    *,
    svc: str = "web",
    address_type: str = "IPv4",
    labels: dict[str, str] | None = None,
) -> EndpointSlice:
    if ports is None:
        ports = [EndpointPort(name="http", port=8080, protocol="TCP")]
    return EndpointSlice(
        metadata=KubeObjectMeta(
            name=name,
            namespace="shop",
            labels=labels if labels is not None else {KUBE_SERVICE_NAME_LABEL: svc},
        ),
        addressType=address_type,
        endpoints=endpoints,
        ports=ports,
    )


def addresses(slice_: EndpointSlice) -> list[str]:
    return [a for e in slice_.endpoints for a in e.addresses]


# --- vip_setting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("false", False), ("TRUE", True), (" False ", False), ("True\n", True)],
)
def test_vip_annotation_wins(value: str, expected: bool) -> None:
    assert vip_setting({USE_CLUSTERSET_IP_ANNOTATION: value}, not expected) is expected


@pytest.mark.parametrize("default", [True, False])
def test_vip_default_without_annotation(default: bool) -> None:
    assert vip_setting(None, default) is default
    assert vip_setting({}, default) is default
    assert vip_setting({"other": "true"}, default) is default


@pytest.mark.parametrize("value", ["yes", "1", "", "truee", "on"])
def test_vip_malformed_annotation(value: str) -> None:
    with pytest.raises(InvalidAnnotation) as err:
        vip_setting({USE_CLUSTERSET_IP_ANNOTATION: value}, True)
    assert f'"{value}"' in str(err.value)
    assert USE_CLUSTERSET_IP_ANNOTATION in str(err.value)
    assert isinstance(err.value, ValueError)


# --- validate_export ---------------------------------------------------------------------------


def test_validate_no_service() -> None:
    valid, reason, message, type_ = validate_export(None)
    assert (valid, reason, type_) == (False, ValidReason.NO_SERVICE, None)
    assert message


def test_validate_external_name() -> None:
    valid, reason, message, type_ = validate_export(
        service(type_="ExternalName", cluster_ip=None, externalName="example.com")
    )
    assert (valid, reason, type_) == (False, ValidReason.INVALID_SERVICE_TYPE, None)
    assert "ExternalName" in message


@pytest.mark.parametrize("type_", ["ClusterIP", "NodePort", "LoadBalancer", None])
def test_validate_clusterset_ip_types(type_: str | None) -> None:
    valid, reason, _, result = validate_export(service(type_=type_))
    assert (valid, reason, result) == (True, ValidReason.VALID, ServiceImportType.CLUSTER_SET_IP)


def test_validate_headless() -> None:
    valid, reason, _, result = validate_export(service(cluster_ip="None"))
    assert (valid, reason, result) == (True, ValidReason.VALID, ServiceImportType.HEADLESS)


def test_validate_no_spec() -> None:
    assert validate_export(Service(metadata=KubeObjectMeta(name="x")))[3] == ServiceImportType.CLUSTER_SET_IP


# --- export_view -------------------------------------------------------------------------------


def test_export_view_fields() -> None:
    svc = service(
        type_="NodePort",
        ports=[
            KubeServicePort(name="http", port=80, targetPort=8080, appProtocol="http", nodePort=30080),
            KubeServicePort(name="dns", port=53, protocol="UDP"),
        ],
        sessionAffinity="ClientIP",
        sessionAffinityConfig=KubeSessionAffinityConfig(clientIP=KubeClientIPConfig(timeoutSeconds=60)),
        ipFamilies=["IPv4"],
        internalTrafficPolicy="Local",
        trafficDistribution="PreferClose",
    )
    view = export_view("c1", svc, T0, {"team": "a"}, {"note": "n"}, True)
    assert view.cluster == "c1"
    assert (view.service_name, view.service_namespace) == ("web", "shop")
    assert view.type == ServiceImportType.CLUSTER_SET_IP
    assert view.ports == [
        ServicePort(name="http", protocol="TCP", app_protocol="http", port=80),
        ServicePort(name="dns", protocol="UDP", port=53),
    ]
    assert view.session_affinity == "ClientIP"
    assert view.session_affinity_config == SessionAffinityConfig(client_ip=ClientIPConfig(timeout_seconds=60))
    assert view.ip_families == ["IPv4"]
    assert view.internal_traffic_policy == "Local"
    assert view.traffic_distribution == "PreferClose"
    assert view.clusterset_ip_enabled is True
    assert view.export_creation_timestamp == T0
    assert view.exported_labels == {"team": "a"}
    assert view.exported_annotations == {"note": "n"}
    # round-trips through the wire form the broker stores
    assert type(view).model_validate(view.to_dict()) == view


def test_export_view_headless_defaults() -> None:
    svc = service(cluster_ip="None", ports=[KubeServicePort(port=5432)])
    view = export_view("c2", svc, T0, None, None, False)
    assert view.type == ServiceImportType.HEADLESS
    assert view.ports == [ServicePort(name=None, protocol="TCP", port=5432)]
    assert view.exported_labels is None and view.exported_annotations is None
    assert view.session_affinity is None and view.ip_families is None


def test_headless_with_use_clusterset_ip_true_is_no_enablement_conflict() -> None:
    """A headless export asking for a VIP: there is none to give, so nothing to conflict about."""
    headless = service(cluster_ip="None")
    view = export_view(
        "c2", headless, T0, None, None, vip_setting({USE_CLUSTERSET_IP_ANNOTATION: "true"}, False)
    )
    assert view.clusterset_ip_enabled is False
    for vip_enabled, ips in ((False, None), (True, ["243.0.0.1"])):
        assert aggregate([view], ips=ips, vip_enabled=vip_enabled).conflicts == []
    # next to an older ClusterSetIP export with a VIP it is a type conflict, and only that
    older = export_view("c1", service(), T0, None, None, True)
    agg = aggregate(
        [view.model_copy(update={"export_creation_timestamp": T0.replace(year=2027)}), older],
        ips=["243.0.0.1"],
        vip_enabled=True,
    )
    assert [r for r, _ in agg.conflicts] == ["TypeConflict"]


def test_export_view_rejects_unexportable() -> None:
    with pytest.raises(ValueError, match="ExternalName"):
        export_view("c1", service(type_="ExternalName"), T0, None, None, False)


# --- broker_slice ------------------------------------------------------------------------------


def test_broker_slice_metadata_and_labels() -> None:
    out = broker_slice("c1", "shop", service(), [eps("web-1", [ep("10.1.0.1")])], use_pod_ips=True)
    assert out.metadata.name == broker_object_name("web", "shop", "c1")
    assert out.metadata.namespace is None
    assert out.metadata.labels == {
        SERVICE_NAME_LABEL: "web",
        SOURCE_CLUSTER_LABEL: "c1",
        SOURCE_NAMESPACE_LABEL: "shop",
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
    }
    assert KUBE_SERVICE_NAME_LABEL not in out.metadata.labels
    assert out.addressType == "IPv4"


def test_broker_slice_pod_ips_all_fields_and_sorted() -> None:
    slices = [
        eps(
            "web-b",
            [
                ep("10.1.0.20", hostname="web-2", nodeName="n2", zone="z2"),
                ep("10.1.0.3", ready=False, serving=True, terminating=True, nodeName="n1"),
            ],
        ),
        eps("web-a", [ep("10.1.0.100", nodeName="n3", zone="z1")]),
    ]
    out = broker_slice("c1", "shop", service(), slices, use_pod_ips=True)
    assert addresses(out) == ["10.1.0.3", "10.1.0.20", "10.1.0.100"]  # numeric order
    first, second, _ = out.endpoints
    assert first.conditions == EndpointConditions(ready=False, serving=True, terminating=True)
    assert first.nodeName == "n1"
    assert (second.hostname, second.nodeName, second.zone) == ("web-2", "n2", "z2")
    assert second.conditions == EndpointConditions(ready=True, serving=True, terminating=False)
    assert [(p.name, p.protocol, p.port) for p in out.ports] == [("http", "TCP", 8080)]


def test_broker_slice_pod_ips_uses_target_ports_not_service_ports() -> None:
    """Named targetPort "web" resolved to 8080 by kube's slices; numbered target ports likewise."""
    svc = service(
        ports=[
            KubeServicePort(name="http", port=80, targetPort="web"),
            KubeServicePort(name="grpc", port=9000, targetPort=9443, appProtocol="grpc"),
        ]
    )
    slice_ports = [
        EndpointPort(name="http", port=8080, protocol="TCP"),
        EndpointPort(name="grpc", port=9443, protocol="TCP", appProtocol="grpc"),
    ]
    out = broker_slice("c1", "shop", svc, [eps("web-1", [ep("10.1.0.1")], slice_ports)], use_pod_ips=True)
    assert [(p.name, p.port, p.appProtocol) for p in out.ports] == [
        ("grpc", 9443, "grpc"),
        ("http", 8080, None),
    ]
    clusterip = broker_slice(
        "c1", "shop", svc, [eps("web-1", [ep("10.1.0.1")], slice_ports)], use_pod_ips=False
    )
    assert [(p.name, p.port, p.appProtocol) for p in clusterip.ports] == [
        ("http", 80, None),
        ("grpc", 9000, "grpc"),
    ]


def test_broker_slice_dedupes_addresses_preferring_ready() -> None:
    slices = [
        eps("web-a", [ep("10.1.0.1", ready=False, serving=False, terminating=True), ep("10.1.0.2")]),
        eps("web-b", [ep("10.1.0.1", ready=True, nodeName="new"), ep("10.1.0.2", nodeName="dup")]),
    ]
    out = broker_slice("c1", "shop", service(), slices, use_pod_ips=True)
    assert addresses(out) == ["10.1.0.1", "10.1.0.2"]
    assert out.endpoints[0].conditions.ready is True
    assert out.endpoints[0].nodeName == "new"
    assert out.endpoints[1].nodeName is None  # equal rank: first slice by name wins


def test_broker_slice_deterministic_across_input_order() -> None:
    a = eps("web-a", [ep("10.1.0.5"), ep("10.1.0.1")])
    b = eps("web-b", [ep("10.1.0.3"), ep("10.1.0.5", ready=False)])
    one = broker_slice("c1", "shop", service(), [a, b], use_pod_ips=True)
    two = broker_slice("c1", "shop", service(), [b, a], use_pod_ips=True)
    assert one.to_dict() == two.to_dict()


def test_broker_slice_nil_conditions_mean_ready() -> None:
    out = broker_slice(
        "c1",
        "shop",
        service(),
        [eps("web-a", [Endpoint(addresses=["10.1.0.1"]), ep("10.1.0.2", ready=None)])],
        use_pod_ips=True,
    )
    for e in out.endpoints:
        assert e.conditions == EndpointConditions(ready=True, serving=True, terminating=False)


def test_broker_slice_skips_foreign_slices() -> None:
    slices = [
        eps("web-a", [ep("10.1.0.1")]),
        eps("other", [ep("10.1.0.2")], svc="other"),
        eps("v6", [ep("fd00::1")], address_type="IPv6"),
        eps(
            "imported",
            [ep("10.2.0.1")],
            labels={SERVICE_NAME_LABEL: "web", MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        ),
        eps("unlabelled", [ep("10.1.0.9")], labels={}),
    ]
    out = broker_slice("c1", "shop", service(), slices, use_pod_ips=True)
    assert addresses(out) == ["10.1.0.1", "10.1.0.9"]


def test_broker_slice_port_disagreement_majority_wins() -> None:
    """Mid rollout a named targetPort can resolve to two numbers; one slice can only carry one."""
    old = eps(
        "web-a", [ep("10.1.0.1"), ep("10.1.0.2")], [EndpointPort(name="http", port=8080, protocol="TCP")]
    )
    new = eps("web-b", [ep("10.1.0.3")], [EndpointPort(name="http", port=9090, protocol="TCP")])
    out = broker_slice("c1", "shop", service(), [new, old], use_pod_ips=True)
    assert [(p.name, p.port) for p in out.ports] == [("http", 8080)]
    assert addresses(out) == ["10.1.0.1", "10.1.0.2"]


def test_broker_slice_ports_union_across_slices() -> None:
    a = eps("web-a", [ep("10.1.0.1")], [EndpointPort(name="http", port=8080, protocol="TCP")])
    b = eps(
        "web-b",
        [ep("10.1.0.2")],
        [
            EndpointPort(name="http", port=8080, protocol="TCP"),
            EndpointPort(name="dns", port=53, protocol="UDP"),
        ],
    )
    out = broker_slice("c1", "shop", service(), [a, b], use_pod_ips=True)
    assert [(p.name, p.protocol, p.port) for p in out.ports] == [("dns", "UDP", 53), ("http", "TCP", 8080)]
    assert addresses(out) == ["10.1.0.1", "10.1.0.2"]


def test_broker_slice_unnamed_port() -> None:
    s = eps("web-a", [ep("10.1.0.1")], [EndpointPort(name="", port=5432, protocol="TCP")])
    out = broker_slice("c1", "shop", service(cluster_ip="None"), [s], use_pod_ips=True)
    assert [(p.name, p.port) for p in out.ports] == [("", 5432)]


def test_broker_slice_no_slices_pod_ips() -> None:
    out = broker_slice("c1", "shop", service(), [], use_pod_ips=True)
    assert out.endpoints == [] and out.ports == []


@pytest.mark.parametrize(
    ("conds", "ready"),
    [
        ([True], True),
        ([False, True], True),
        ([False, False], False),
        ([], False),
        ([None], True),
    ],
)
def test_broker_slice_cluster_ip_ready(conds: list[bool | None], ready: bool) -> None:
    slices = [eps("web-a", [ep(f"10.1.0.{i + 1}", ready=r) for i, r in enumerate(conds)])]
    out = broker_slice("c1", "shop", service(), slices, use_pod_ips=False)
    assert addresses(out) == ["10.96.0.10"]
    assert out.endpoints[0].conditions == EndpointConditions(ready=ready, serving=ready, terminating=False)
    assert out.endpoints[0].hostname is None and out.endpoints[0].nodeName is None
    assert [(p.name, p.protocol, p.port) for p in out.ports] == [("http", "TCP", 80)]


def test_broker_slice_cluster_ip_ready_across_slices() -> None:
    slices = [eps("web-a", [ep("10.1.0.1", ready=False)]), eps("web-b", [ep("10.1.0.2")])]
    out = broker_slice("c1", "shop", service(), slices, use_pod_ips=False)
    assert out.endpoints[0].conditions.ready is True


def test_broker_slice_cluster_ip_missing_or_headless() -> None:
    assert broker_slice("c1", "shop", service(cluster_ip=None), [], use_pod_ips=False).endpoints == []
    assert broker_slice("c1", "shop", service(cluster_ip="None"), [], use_pod_ips=False).endpoints == []


def test_broker_slice_cluster_ip_port_defaults() -> None:
    svc = service(ports=[KubeServicePort(port=443)])
    out = broker_slice("c1", "shop", svc, [], use_pod_ips=False)
    assert [(p.name, p.protocol, p.port) for p in out.ports] == [("", "TCP", 443)]


def test_broker_slice_requires_service_name() -> None:
    with pytest.raises(ValueError):
        broker_slice("c1", "shop", Service(metadata=KubeObjectMeta()), [], use_pod_ips=True)


# --- imported slices ---------------------------------------------------------------------------


def test_imported_slice_name() -> None:
    name = imported_slice_name("web", "c1")
    assert name == imported_slice_name("web", "c1")
    assert name.startswith("web-c1-")
    assert imported_slice_name("a-b", "c") != imported_slice_name("a", "b-c")
    long = imported_slice_name("s" * 63, "c" * 63)
    assert len(long) <= 253
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", long)


def test_local_slice_copy() -> None:
    broker = broker_slice(
        "c2", "shop", service(), [eps("web-a", [ep("10.2.0.1", zone="z")])], use_pod_ips=True
    )
    broker.metadata.namespace = "isthmus-broker"
    broker.metadata.resourceVersion = "42"
    copy_ = local_slice_copy(broker, "shop", "web", "c2", "uid-1", "web")
    assert copy_.metadata.name == imported_slice_name("web", "c2")
    assert copy_.metadata.namespace == "shop"
    assert copy_.metadata.resourceVersion is None
    assert copy_.metadata.labels == {
        SERVICE_NAME_LABEL: "web",
        SOURCE_CLUSTER_LABEL: "c2",
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
    }
    (owner,) = copy_.metadata.ownerReferences
    assert (owner.apiVersion, owner.kind, owner.name, owner.uid) == (
        "multicluster.x-k8s.io/v1beta1",
        "ServiceImport",
        "web",
        "uid-1",
    )
    assert owner.controller is True and owner.blockOwnerDeletion is False
    assert copy_.addressType == "IPv4"
    assert copy_.endpoints == broker.endpoints and copy_.ports == broker.ports
    copy_.endpoints.clear()  # lists of its own (items shared: both are only read)
    assert broker.endpoints and broker.endpoints[0].zone == "z"


# --- ServiceImports ----------------------------------------------------------------------------


def _agg() -> Aggregate:
    e = ExportedServiceSpec(
        cluster="c2",
        service_name="web",
        service_namespace="shop",
        type=ServiceImportType.CLUSTER_SET_IP,
        ports=[ServicePort(name="http", port=80)],
        export_creation_timestamp=T0,
        clusterset_ip_enabled=True,
        exported_labels={"team": "a", SERVICE_NAME_LABEL: "spoof"},
        exported_annotations={"note": "n", CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION: "spoof"},
    )
    return aggregate([e, e.model_copy(update={"cluster": "c1"})], ips=["243.0.0.1"], vip_enabled=True)


def test_broker_service_import() -> None:
    si = broker_service_import(_agg(), service="web", namespace="shop", vip_enabled=True, allocated_by="c1")
    assert si.metadata.name == broker_object_name("web", "shop")
    assert si.metadata.namespace is None
    assert si.metadata.labels == {"team": "a", SERVICE_NAME_LABEL: "web", SOURCE_NAMESPACE_LABEL: "shop"}
    assert si.metadata.annotations == {
        "note": "n",
        USE_CLUSTERSET_IP_ANNOTATION: "true",
        CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION: "c1",
    }
    assert si.spec.ips == ["243.0.0.1"]
    assert [c.cluster for c in si.status.clusters] == ["c1", "c2"]


def test_broker_service_import_without_vip_has_no_allocated_by() -> None:
    agg = _agg()
    agg.spec.ips = None
    si = broker_service_import(agg, service="web", namespace="shop", vip_enabled=False, allocated_by="c1")
    assert si.metadata.annotations is not None
    assert si.metadata.annotations[USE_CLUSTERSET_IP_ANNOTATION] == "false"
    assert CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION not in si.metadata.annotations


def test_local_service_import() -> None:
    broker = broker_service_import(
        _agg(), service="web", namespace="shop", vip_enabled=True, allocated_by="c1"
    )
    broker.metadata.namespace = "isthmus-broker"
    broker.metadata.uid = "u"
    broker.metadata.resource_version = "7"
    local = local_service_import(broker, namespace="shop", service="web")
    assert (local.metadata.name, local.metadata.namespace) == ("web", "shop")
    assert local.metadata.uid is None and local.metadata.resource_version is None
    assert local.metadata.labels == {"team": "a"}
    assert local.metadata.annotations == {
        "note": "n",
        USE_CLUSTERSET_IP_ANNOTATION: "true",
        CLUSTERSET_IP_ALLOCATED_BY_ANNOTATION: "c1",
    }
    assert local.spec == broker.spec and local.spec is not broker.spec
    assert [c.cluster for c in local.status.clusters] == ["c1", "c2"]
    assert local.status.conditions == []
    assert local.to_dict()["kind"] == "ServiceImport"
