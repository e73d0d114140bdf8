"""What a ServiceImport tells about itself (docs/discovery.md "ServiceImport conditions"): the Ready
condition, status.endpointSliceObjects, spec.ipFamilies on headless imports; and the ports an
imported EndpointSlice lists when the exporters' port sets conflict (KEP-1645 "Service Port")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import ConditionType, ConflictReason, broker_object_name
from tests.harness.clusterset import BROKER_NS, ClusterSet, condition, ports_of, reasons, service
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(150)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("import-conditions"), n=3) as cs:
        yield cs


async def _ns(cs: ClusterSet, ns: str) -> None:
    for i in range(len(cs.clusters)):
        await cs.ensure_namespace(i, ns)


async def ready_of(cs: ClusterSet, i: int, name: str, ns: str, status: str, reason: str) -> dict[str, Any]:
    """The import in cluster i once its Ready condition has that status and reason."""

    async def check() -> dict[str, Any]:
        imp = await cs.local_import(i, name, ns)
        assert imp is not None, f"no ServiceImport in {cs.clusters[i].id}"
        cond = condition(imp, ConditionType.READY)
        assert cond is not None and (cond["status"], cond["reason"]) == (status, reason), (
            f"{cs.clusters[i].id}: {cond}")
        return imp

    imp: dict[str, Any] = await eventually(check, what=f"Ready={status} {reason} on {ns}/{name} in {cs.clusters[i].id}")
    return imp


async def test_ready_with_observed_generation_and_endpoint_slice_objects(cs: ClusterSet) -> None:
    ns = "ic-ready"
    await _ns(cs, ns)
    await cs.export(0, "web", ns)
    for i in range(3):
        imp = await ready_of(cs, i, "web", ns, "True", "Ready")
        cond = condition(imp, ConditionType.READY) or {}
        assert cond.get("observedGeneration") == imp["metadata"]["generation"], (imp["metadata"], cond)
        assert cond["message"] == "the service is imported from 1 cluster"
        assert imp["status"]["endpointSliceObjects"] == "Present"
        assert imp["spec"]["ipFamilies"] == ["IPv4"]
    first = condition(await cs.local_import(2, "web", ns), ConditionType.READY) or {}
    await asyncio.sleep(1.1)  # lastTransitionTime has second precision
    await cs.put(0, service("web", ns, ports=[{"name": "http", "port": 81}]))  # a new spec: generation 2

    async def updated() -> bool:
        imp = await cs.local_import(2, "web", ns)
        assert imp is not None and imp["metadata"]["generation"] == 2
        cond = condition(imp, ConditionType.READY) or {}
        assert (cond.get("status"), cond.get("observedGeneration")) == ("True", 2), cond
        assert cond["lastTransitionTime"] == first["lastTransitionTime"], "still True: the time stays"
        return True

    await eventually(updated)


async def test_pending_while_an_exporters_slice_is_missing(cs: ClusterSet) -> None:
    ns = "ic-pending"
    await _ns(cs, ns)
    await cs.export(0, "web", ns)
    await cs.export(1, "web", ns)
    await cs.wait_import(2, "web", ns, ["c1", "c2"])
    await ready_of(cs, 2, "web", ns, "True", "Ready")
    # c2's agent stops and its broker slice goes: the others wait for it (no heartbeat missed yet).
    await cs.stop_agent(1)
    try:
        await cs.broker_client.delete(EndpointSlice, broker_object_name("web", ns, "c2"), namespace=BROKER_NS)
        for i in (0, 2):
            imp = await ready_of(cs, i, "web", ns, "False", "Pending")
            assert (condition(imp, ConditionType.READY) or {})["message"] == (
                "waiting for the EndpointSlices of cluster c2")
    finally:
        await cs.start_agent(1)
    await ready_of(cs, 2, "web", ns, "True", "Ready")


async def test_ip_family_not_supported_on_an_ipv6_only_import(cs: ClusterSet) -> None:
    ns = "ic-family"
    await _ns(cs, ns)
    svc = service("web", ns, headless=True)
    assert svc.spec is not None
    svc.spec.ipFamilies, svc.spec.ipFamilyPolicy = ["IPv6"], "SingleStack"
    await cs.export(0, "web", ns, svc=svc, endpoints=[("127.20.9.1", True, "web-0")])
    imp = await ready_of(cs, 2, "web", ns, "False", "IPFamilyNotSupported")
    assert imp["spec"]["ipFamilies"] == ["IPv6"]
    assert (condition(imp, ConditionType.READY) or {})["message"] == (
        "the service is exported as IPv6 but this cluster serves IPv4 only")
    svc.spec.ipFamilies = ["IPv4"]
    await cs.put(0, svc)
    imp = await ready_of(cs, 2, "web", ns, "True", "Ready")
    assert imp["spec"]["ipFamilies"] == ["IPv4"]


async def test_headless_import_has_ip_families_and_a_family_conflict(cs: ClusterSet) -> None:
    """The conformance suite waits for a headless import's spec.ipFamilies before anything else; an
    exporter lacking one of the import's families is an IPFamilyConflict on both exports."""
    ns = "ic-headless"
    await _ns(cs, ns)
    dual = service("db", ns, headless=True)
    assert dual.spec is not None
    dual.spec.ipFamilies, dual.spec.ipFamilyPolicy = ["IPv4", "IPv6"], "PreferDualStack"
    await cs.export(0, "db", ns, svc=dual, endpoints=[("127.20.9.1", True, "db-0")])
    await cs.wait_exported(0, "db", ns)
    await asyncio.sleep(1.1)  # c1 strictly older
    single = service("db", ns, headless=True)
    assert single.spec is not None
    single.spec.ipFamilies = ["IPv4"]
    await cs.export(1, "db", ns, svc=single, endpoints=[("127.20.9.2", True, "db-0")])

    async def check() -> bool:
        for i in (0, 1):
            se = await cs.get_export(i, "db", ns)
            assert reasons(se) == {ConflictReason.IP_FAMILY}, f"{cs.clusters[i].id}: {reasons(se)}"
        for i in range(3):
            imp = await cs.local_import(i, "db", ns)
            assert imp is not None and imp["spec"]["ipFamilies"] == ["IPv4", "IPv6"]
            assert not imp["spec"].get("ips")
        return True

    await eventually(check, what="IPFamilyConflict on both exports, ipFamilies on every import")
    se = await cs.get_export(1, "db", ns)
    assert "its endpoints are not reached over IPv6" in (condition(se, ConditionType.CONFLICT) or {})["message"]


async def test_conflicting_port_reaches_only_the_clusters_exposing_it(cs: ClusterSet) -> None:
    """Conformance cases 10/26/27 at the EndpointSlice level: a cluster's imported slice lists only the
    import's ports its Service exposes with the same name, protocol and number."""
    ns = "ic-ports"
    await _ns(cs, ns)
    tcp_udp = [{"name": "tcp", "port": 42}, {"name": "udp", "port": 42, "protocol": "UDP"}]
    await cs.export(0, "hello", ns, svc=service("hello", ns, ports=tcp_udp),
                    slice_ports=[{"name": "tcp", "port": 42}, {"name": "udp", "port": 42, "protocol": "UDP"}])
    await cs.wait_exported(0, "hello", ns)
    await asyncio.sleep(1.1)
    # c2: tcp on another number (case 26) and an extra port of its own (case 27).
    await cs.export(1, "hello", ns, svc=service("hello", ns, ports=[{"name": "tcp", "port": 4242},
                                                                    {"name": "tcp2", "port": 4243}]),
                    slice_ports=[{"name": "tcp", "port": 42}, {"name": "tcp2", "port": 42}])

    async def check() -> bool:
        for i in (0, 1):
            se = await cs.get_export(i, "hello", ns)
            assert reasons(se) == {ConflictReason.PORT}, f"{cs.clusters[i].id}: {reasons(se)}"
        imp = await cs.local_import(2, "hello", ns)
        assert imp is not None
        assert {n: (p["protocol"], p["port"]) for n, p in ports_of(imp).items()} == {
            "tcp": ("TCP", 42), "udp": ("UDP", 42), "tcp2": ("TCP", 4243)}
        for i in range(3):
            slices = await cs.imported_slices(i, "hello", ns)
            got = {c: sorted(p["name"] for p in s.get("ports") or []) for c, s in slices.items()}
            assert got == {"c1": ["tcp", "udp"], "c2": ["tcp2"]}, f"{cs.clusters[i].id}: {got}"
        return True

    await eventually(check, what="union ports, Conflict on both, per-cluster slice ports")
