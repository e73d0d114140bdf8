"""The Services, EndpointSlices and ServiceImports the proxy tests write (moved from
tests/integration/test_proxy_service.py)."""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.mcs import (
    KUBE_SERVICE_NAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    ServiceImport,
)
from isthmus.kube.resources import resource_for

SI = resource_for(ServiceImport)
NS = "shop"
SVC_PORT = 8000
TARGET = 18080


def service(name: str, cluster_ip: str, ports: list[dict[str, Any]] | None = None, **spec: Any) -> Service:
    return Service.from_dict(
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterIP": cluster_ip,
                "clusterIPs": [cluster_ip],
                "ports": ports
                or [{"name": "http", "port": SVC_PORT, "targetPort": TARGET, "protocol": "TCP"}],
                **spec,
            },
        }
    )


def endpoints(*ips: str, ready: bool = True) -> list[dict[str, Any]]:
    return [{"addresses": [ip], "conditions": {"ready": ready}} for ip in ips]


def kube_slice(svc: str, ips: list[str], ports: list[dict[str, Any]] | None = None) -> EndpointSlice:
    return EndpointSlice.from_dict(
        {
            "metadata": {"name": f"{svc}-abcde", "namespace": NS, "labels": {KUBE_SERVICE_NAME_LABEL: svc}},
            "addressType": "IPv4",
            "endpoints": endpoints(*ips),
            "ports": ports or [{"name": "http", "port": TARGET, "protocol": "TCP"}],
        }
    )


def imported_slice(svc: str, cluster: str, ips: list[str]) -> EndpointSlice:
    return EndpointSlice.from_dict(
        {
            "metadata": {
                "name": f"{svc}-{cluster}",
                "namespace": NS,
                "labels": {
                    SERVICE_NAME_LABEL: svc,
                    SOURCE_CLUSTER_LABEL: cluster,
                    MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                },
            },
            "addressType": "IPv4",
            "endpoints": endpoints(*ips),
            "ports": [{"name": "http", "port": TARGET, "protocol": "TCP"}],
        }
    )


async def create_import(client: AsyncClient, name: str, vip: str, clusters: list[str], **spec: Any) -> None:
    obj = SI.from_dict(
        {
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "type": "ClusterSetIP",
                "ips": [vip],
                "ports": [{"name": "http", "port": SVC_PORT, "protocol": "TCP"}],
                **spec,
            },
        }
    )
    await client.create(obj)
    await set_import_clusters(client, name, clusters)


async def set_import_clusters(client: AsyncClient, name: str, clusters: list[str]) -> None:
    await client.patch(
        SI.Status,
        name,
        {"status": {"clusters": [{"cluster": c} for c in clusters]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )
