"""The ServiceImport Ready condition (isthmus.discovery.imports.ready_condition; docs/discovery.md
"ServiceImport conditions")."""

from __future__ import annotations

from typing import Any

from isthmus.api.base import ObjectMeta
from isthmus.api.mcs import (
    USE_CLUSTERSET_IP_ANNOTATION,
    ClusterStatus,
    ServiceImport,
    ServiceImportSpec,
    ServiceImportStatus,
    ServiceImportType,
)
from isthmus.discovery.imports import CLUSTER_FAMILIES, ready_condition

V4 = CLUSTER_FAMILIES


def imp(families: list[Any] | None = None, ips: list[str] | None = None, vip: bool = False,
        clusters: tuple[str, ...] = ("c1", "c2")) -> ServiceImport:
    return ServiceImport(
        metadata=ObjectMeta(name="web", namespace="shop",
                            annotations={USE_CLUSTERSET_IP_ANNOTATION: "true" if vip else "false"}),
        spec=ServiceImportSpec(type=ServiceImportType.CLUSTER_SET_IP, ip_families=families, ips=ips),
        status=ServiceImportStatus(clusters=[ClusterStatus(cluster=c) for c in clusters]),
    )


def test_ready_when_everything_is_in_place() -> None:
    c = ready_condition(imp(["IPv4"]), families=V4, waiting_for=[], generation=3)
    assert (c.type, c.status, c.reason, c.observed_generation) == ("Ready", "True", "Ready", 3)
    assert c.message == "the service is imported from 2 clusters"
    one = ready_condition(imp(["IPv4"], clusters=("c1",)), families=V4, waiting_for=[], generation=1)
    assert one.message == "the service is imported from 1 cluster"


def test_pending_names_what_it_waits_for() -> None:
    c = ready_condition(imp(["IPv4"], vip=True), families=V4,
                        waiting_for=["the EndpointSlices of cluster c2"], generation=1)
    assert (c.status, c.reason) == ("False", "Pending")
    assert c.message == "waiting for the ClusterSet IP; the EndpointSlices of cluster c2"
    with_vip = ready_condition(imp(["IPv4"], ips=["243.0.0.1"], vip=True), families=V4, waiting_for=[],
                               generation=1)
    assert with_vip.status == "True"


def test_ip_family_not_supported_only_when_no_family_is_served() -> None:
    c = ready_condition(imp(["IPv6"]), families=V4, waiting_for=["x"], generation=1)
    assert (c.status, c.reason) == ("False", "IPFamilyNotSupported")
    assert c.message == "the service is exported as IPv6 but this cluster serves IPv4 only"
    assert ready_condition(imp(["IPv6", "IPv4"]), families=V4, waiting_for=[], generation=1).status == "True"
    assert ready_condition(imp(["IPv6"]), families=frozenset({"IPv4", "IPv6"}), waiting_for=[],
                           generation=1).status == "True"
