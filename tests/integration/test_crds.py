"""Generated CRDs on the embedded apiserver: they install, serve, default, and reject invalid objects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from isthmus.api import CRD_MODELS
from isthmus.api.base import new_condition
from isthmus.api.crdgen import all_crds
from isthmus.api.mcs import ClusterStatus, ServiceImport
from isthmus.kube.helpers import install_crds, patch_status
from isthmus.kube.resources import RESOURCES, resource_for

NS = "shop"
SI = resource_for(ServiceImport)

VALID: dict[str, dict[str, Any]] = {
    "ServiceExport": {"spec": {"exportedLabels": {"a": "b"}}},
    "ServiceImport": {
        "spec": {"type": "ClusterSetIP", "ports": [{"name": "http", "port": 80}], "ips": ["243.0.0.1"]}
    },
    "Broker": {"spec": {"clustersetIPEnabled": True, "clustersetIPCIDRRange": ["243.0.0.0/8"]}},
    "Cluster": {"spec": {"clusterID": "east", "clustersetIPCIDR": ["243.1.0.0/16"]}},
    "ServiceDiscovery": {"spec": {"clusterID": "east"}},
    "ExportedService": {
        "spec": {
            "cluster": "east",
            "serviceName": "web",
            "serviceNamespace": "shop",
            "type": "Headless",
            "ports": [],
            "exportCreationTimestamp": "2024-05-01T12:00:00Z",
        }
    },
}

INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("ServiceImport", {"spec": {"type": "LoadBalancer", "ports": []}}, "spec.type"),
    ("ServiceImport", {"spec": {"ports": []}}, "spec.type"),
    ("ServiceImport", {"spec": {"type": "Headless"}}, "spec.ports"),
    ("ServiceImport", {"spec": {"type": "Headless", "ports": [{"port": 0}]}}, "spec.ports[0].port"),
    ("ServiceImport", {"spec": {"type": "Headless", "ports": [{"port": "http"}]}}, "spec.ports[0].port"),
    (
        "ServiceImport",
        {"spec": {"type": "Headless", "ports": [{"port": 80, "protocol": "ICMP"}]}},
        "protocol",
    ),
    ("ServiceImport", {"spec": {"type": "Headless", "ports": [], "ips": ["a", "b", "c"]}}, "spec.ips"),
    ("ServiceImport", {}, "spec"),
    ("Cluster", {"spec": {"clusterID": "East_1"}}, "spec.clusterID"),
    ("Cluster", {"spec": {"clusterID": "east", "clustersetIPCIDR": ["243.1.0.0/40"]}}, "clustersetIPCIDR"),
    ("Broker", {"spec": {"clustersetIPEnabled": "yes"}}, "spec.clustersetIPEnabled"),
    ("ExportedService", {"spec": {"cluster": "east", "type": "Headless"}}, "spec.serviceName"),
]


def _obj(kind: str, name: str, body: dict[str, Any]) -> Any:
    model = next(m for m in CRD_MODELS if m.crd.kind == kind)
    res = RESOURCES[model]
    return res.from_dict(
        {
            "apiVersion": model.crd.api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": NS},
            **body,
        }
    )


async def _ready(client: AsyncClient) -> None:
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name=NS)))


async def test_install_crds_establishes_every_crd_idempotently(apiserver: Any) -> None:
    client = apiserver.client()
    async with asyncio.timeout(30):
        names = await install_crds(client)
        assert names == [c["metadata"]["name"] for c in all_crds()]
        assert await install_crds(client) == names  # again: no error, nothing to wait for
    for name in names:
        crd = await client.get(CustomResourceDefinition, name)
        assert crd.status is not None
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


async def test_valid_objects_of_every_kind_are_accepted(apiserver: Any) -> None:
    client = apiserver.client()
    await _ready(client)
    for kind, body in VALID.items():
        created = await client.create(_obj(kind, "ok", body))
        assert created.metadata is not None and created.metadata.uid, kind
        model = next(m for m in CRD_MODELS if m.crd.kind == kind)
        model.from_dict(created)  # what the server stores parses back into our model


@pytest.mark.parametrize(("kind", "body", "field"), INVALID, ids=[f"{k}:{f}" for k, _, f in INVALID])
async def test_invalid_objects_are_rejected(
    apiserver: Any, kind: str, body: dict[str, Any], field: str
) -> None:
    client = apiserver.client()
    await _ready(client)
    with pytest.raises(ApiError) as err:
        await client.create(_obj(kind, "bad", body))
    assert err.value.status.code == 422
    assert field in (err.value.status.message or ""), err.value.status.message


async def test_schema_defaults_apply(apiserver: Any) -> None:
    client = apiserver.client()
    await _ready(client)
    created = await client.create(
        _obj("ServiceImport", "web", {"spec": {"type": "Headless", "ports": [{"port": 80}]}})
    )
    assert created["spec"]["ports"] == [{"port": 80, "protocol": "TCP"}]


async def test_status_subresource_and_condition_schema(apiserver: Any) -> None:
    client = apiserver.client()
    await _ready(client)
    si = ServiceImport.model_validate(
        {"metadata": {"name": "web", "namespace": NS}, "spec": {"type": "ClusterSetIP", "ports": []}}
    )
    si.status.clusters = [ClusterStatus(cluster="east")]  # ignored on create (status subresource)
    created = await client.create(SI.from_dict(si.to_dict()))
    assert not (created.get("status") or {}).get("clusters")

    si = ServiceImport.from_dict(created)
    si.status.conditions = [new_condition("Ready", True, "Ready")]
    si.status.clusters = [ClusterStatus(cluster="east")]
    updated = await patch_status(client, si, field_manager="test")
    assert [c.cluster for c in updated.status.clusters] == ["east"]
    assert updated.spec == si.spec

    bad_status = {
        "conditions": [
            {
                "type": "Ready",
                "status": "Yes",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2024-05-01T12:00:00Z",
            }
        ]
    }
    bad_reason = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "not ok",
                "message": "",
                "lastTransitionTime": "2024-05-01T12:00:00Z",
            }
        ]
    }
    no_time = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]}
    for status in (bad_status, bad_reason, no_time):
        with pytest.raises(ApiError) as err:
            await client.patch(SI.Status, "web", {"status": status}, namespace=NS, patch_type=PatchType.MERGE)
        assert err.value.status.code == 422, status


async def test_crds_survive_restart(apiserver: Any) -> None:
    client = apiserver.client()
    await _ready(client)
    await client.create(_obj("ServiceExport", "web", VALID["ServiceExport"]))
    await apiserver.restart()
    client = apiserver.client()
    got = await client.get(
        RESOURCES[next(m for m in CRD_MODELS if m.crd.kind == "ServiceExport")], "web", namespace=NS
    )
    assert got["spec"] == {"exportedLabels": {"a": "b"}}
    with pytest.raises(ApiError):
        await client.create(_obj("Cluster", "bad", {"spec": {"clusterID": "Bad"}}))
