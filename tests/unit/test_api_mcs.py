"""isthmus.api.mcs: MCS and isthmus.io discovery models, constants, naming."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from isthmus.api import CRD_MODELS
from isthmus.api.base import DNS1123_LABEL_PATTERN
from isthmus.api.mcs import (
    Broker,
    Cluster,
    ConditionType,
    ConflictReason,
    ExportedService,
    ImportConditionType,
    ImportReadyReason,
    ReadyReason,
    ServiceDiscovery,
    ServiceExport,
    ServiceImport,
    ServiceImportType,
    ValidReason,
    broker_object_name,
    conflict_condition,
)

SERVICE_IMPORT = {
    "apiVersion": "multicluster.x-k8s.io/v1beta1",
    "kind": "ServiceImport",
    "metadata": {
        "name": "web",
        "namespace": "shop",
        "annotations": {"lighthouse.submariner.io/clusterset-ip-allocated-by": "east"},
    },
    "spec": {
        "type": "ClusterSetIP",
        "ports": [
            {"name": "http", "protocol": "TCP", "appProtocol": "http", "port": 80},
            {"name": "dns", "protocol": "UDP", "port": 53},
        ],
        "ips": ["243.0.0.1"],
        "ipFamilies": ["IPv4"],
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 300}},
        "internalTrafficPolicy": "Cluster",
        "trafficDistribution": "PreferClose",
    },
    "status": {
        "clusters": [{"cluster": "east"}, {"cluster": "west"}],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "lastTransitionTime": "2024-05-01T12:00:00Z",
                "reason": "Ready",
                "message": "",
            }
        ],
    },
}


def test_service_import_round_trip_every_field() -> None:
    si = ServiceImport.model_validate(SERVICE_IMPORT)
    assert si.spec.type is ServiceImportType.CLUSTER_SET_IP
    assert si.spec.session_affinity_config and si.spec.session_affinity_config.client_ip
    assert si.spec.session_affinity_config.client_ip.timeout_seconds == 300
    assert [c.cluster for c in si.status.clusters] == ["east", "west"]
    assert si.to_dict() == SERVICE_IMPORT


def test_service_import_defaults_and_rejections() -> None:
    si = ServiceImport.model_validate({"spec": {"type": "Headless", "ports": [{"port": 8080}]}})
    assert si.spec.ports[0].protocol == "TCP"
    assert si.to_dict()["spec"] == {"type": "Headless", "ports": [{"protocol": "TCP", "port": 8080}]}
    for bad in (
        {"type": "LoadBalancer"},
        {"type": "Headless", "ports": [{"port": 0}]},
        {"type": "Headless", "ports": [{"port": 80, "protocol": "ICMP"}]},
        {"type": "Headless", "sessionAffinity": "Sticky"},
        {"type": "Headless", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86401}}},
    ):
        with pytest.raises(ValidationError):
            ServiceImport.model_validate({"spec": bad})


def test_service_export_round_trip() -> None:
    wire = {
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceExport",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "annotations": {"lighthouse.submariner.io/use-clusterset-ip": "true"},
        },
        "spec": {"exportedLabels": {"tier": "front"}, "exportedAnnotations": {"a": "b"}},
        "status": {"conditions": []},
    }
    se = ServiceExport.model_validate(wire)
    assert se.spec.exported_labels == {"tier": "front"}
    assert se.to_dict() == wire
    bare = ServiceExport.model_validate({"metadata": {"name": "web"}})
    assert bare.to_dict()["spec"] == {} and bare.status.conditions == []


def test_broker_objects_aliases() -> None:
    broker = Broker()
    assert broker.to_dict()["spec"] == {
        "clustersetIPEnabled": False,
        "clustersetIPCIDRRange": ["243.0.0.0/8"],
    }
    with pytest.raises(ValidationError):
        Broker.model_validate({"spec": {"clustersetIPCIDRRange": ["243.0.0.0/33"]}})

    cluster = Cluster.model_validate(
        {
            "metadata": {"name": "east"},
            "spec": {
                "clusterID": "east",
                "clustersetIPCIDR": ["243.1.0.0/16"],
                "clustersetIPEnabled": True,
                "joinedAt": "2024-05-01T12:00:00Z",
            },
        }
    )
    assert cluster.spec.cluster_id == "east" and cluster.spec.joined_at == datetime(
        2024, 5, 1, 12, tzinfo=UTC
    )
    assert cluster.to_dict()["spec"]["clusterID"] == "east"
    for bad_id in ("East", "-east", "a" * 64, "", "east.1"):
        with pytest.raises(ValidationError):
            Cluster.model_validate({"spec": {"clusterID": bad_id}})

    sd = ServiceDiscovery.model_validate(
        {"spec": {"clusterID": "east", "clustersetIPCIDR": ["243.1.0.0/16"]}}
    )
    assert sd.to_dict()["spec"] == {
        "clusterID": "east",
        "clustersetIPEnabled": False,
        "clustersetIPCIDR": ["243.1.0.0/16"],
        "brokerNamespace": "isthmus-broker",
        "clustersetDomain": "clusterset.local",
    }


def test_exported_service_round_trip() -> None:
    wire = {
        "apiVersion": "isthmus.io/v1alpha1",
        "kind": "ExportedService",
        "metadata": {"name": "x", "namespace": "isthmus-broker"},
        "spec": {
            "cluster": "east",
            "serviceName": "web",
            "serviceNamespace": "shop",
            "type": "ClusterSetIP",
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "sessionAffinity": "None",
            "clustersetIPEnabled": True,
            "exportCreationTimestamp": "2024-05-01T12:00:00Z",
            "exportedLabels": {"l": "v"},
        },
        "status": {"conditions": []},
    }
    assert ExportedService.model_validate(wire).to_dict() == wire


def test_condition_strings() -> None:
    assert [c.value for c in ConditionType] == ["Valid", "Ready", "Conflict"]
    assert {r.value for r in ValidReason} == {"Valid", "NoService", "InvalidServiceType", "InvalidAnnotation"}
    assert {r.value for r in ReadyReason} == {"Exported", "Ready", "Pending", "Failed"}
    assert {r.value for r in ConflictReason} == {
        "PortConflict",
        "TypeConflict",
        "SessionAffinityConflict",
        "SessionAffinityConfigConflict",
        "LabelsConflict",
        "AnnotationsConflict",
        "InternalTrafficPolicyConflict",
        "TrafficDistributionConflict",
        "IPFamilyConflict",
        "ClusterSetIPEnablementConflict",
        "NoConflicts",
    }
    assert [c.value for c in ImportConditionType] == ["Ready"]
    assert {r.value for r in ImportReadyReason} == {"Ready", "Pending", "IPFamilyNotSupported"}


def test_conflict_condition_joins_reasons_and_messages() -> None:
    none = conflict_condition([], observed_generation=3)
    assert (none.type, none.status, none.reason, none.observed_generation) == (
        "Conflict",
        "False",
        "NoConflicts",
        3,
    )
    c = conflict_condition(
        [
            (ConflictReason.PORT, "port http differs on west"),
            (ConflictReason.TYPE, "type differs"),
            (ConflictReason.PORT, "port dns differs on west"),
        ]
    )
    assert c.status == "True"
    assert c.reason == "PortConflict,TypeConflict"
    assert c.message == "port http differs on west; type differs; port dns differs on west"
    assert c.to_dict()["reason"] == "PortConflict,TypeConflict"  # plain string on the wire


def test_broker_object_name_never_collides_and_is_valid() -> None:
    a = broker_object_name("a-b", "c")
    b = broker_object_name("a", "b-c")
    assert a != b
    assert broker_object_name("a", "b", "east") != broker_object_name("a", "b", "west") != a
    assert broker_object_name("web", "shop") == broker_object_name("web", "shop")  # stable
    longest = broker_object_name("s" * 63, "n" * 63, "c" * 63)
    assert len(longest) <= 253
    subdomain = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
    assert re.match(subdomain, longest) and re.match(DNS1123_LABEL_PATTERN, broker_object_name("web", "shop"))


def test_registry_lists_every_model_once() -> None:
    names = [m.crd.crd_name for m in CRD_MODELS]
    assert len(names) == len(set(names))
    assert {m.crd.kind for m in CRD_MODELS} >= {
        "ServiceExport",
        "ServiceImport",
        "Broker",
        "Cluster",
        "ServiceDiscovery",
        "ExportedService",
    }
