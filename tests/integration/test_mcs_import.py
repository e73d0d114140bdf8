"""Aggregation on the broker, ServiceImport copies and imported EndpointSlices in member clusters,
propagation of Service changes, and cleanup (docs/discovery.md "Objects in each member cluster",
"EndpointSlice content")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import (
    KUBE_SERVICE_NAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    SOURCE_NAMESPACE_LABEL,
    ConditionType,
    ServiceImportType,
    ValidReason,
    broker_object_name,
)
from isthmus.discovery.endpoints import imported_slice_name
from tests.harness.clusterset import (
    BROKER_NS,
    SE,
    SI,
    ClusterSet,
    addresses_of,
    annotations_of,
    as_dict,
    clusters_of,
    endpoint_slice,
    get_or_none,
    ips_of,
    labels_of,
    ports_of,
    service,
)
from tests.harness.polling import eventually, never

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("import"), n=3) as cs:
        yield cs


async def _ns_everywhere(cs: ClusterSet, ns: str, clusters: range | list[int] | None = None) -> None:
    for i in clusters if clusters is not None else range(len(cs.clusters)):
        await cs.ensure_namespace(i, ns)


def _endpoints(slice_: dict[str, Any]) -> list[dict[str, Any]]:
    return list(slice_.get("endpoints") or [])


async def _slices_from(
    cs: ClusterSet, i: int, name: str, ns: str, sources: list[str]
) -> dict[str, dict[str, Any]]:
    async def check() -> tuple[dict[str, dict[str, Any]]]:
        got = await cs.imported_slices(i, name, ns)
        assert sorted(got) == sorted(sources), (
            f"{cs.clusters[i].id}: slices from {sorted(got)}, want {sources}"
        )
        return (got,)

    return (await eventually(check, what=f"imported slices of {ns}/{name} in {cs.clusters[i].id}"))[0]


async def test_aggregate_names_do_not_collide_across_namespaces(cs: ClusterSet) -> None:
    # a-b/c and a/b-c are different services: `<svc>-<ns>` would name both "a-b-c".
    await _ns_everywhere(cs, "c")
    await _ns_everywhere(cs, "b-c")
    await cs.export(0, "a-b", "c", svc=service("a-b", "c", ports=[{"name": "one", "port": 81}]))
    await cs.export(0, "a", "b-c", svc=service("a", "b-c", ports=[{"name": "two", "port": 82}]))
    agg1 = await cs.wait_exported(0, "a-b", "c")
    agg2 = await cs.wait_exported(0, "a", "b-c")
    assert agg1["metadata"]["name"] != agg2["metadata"]["name"]
    assert agg1["metadata"]["name"] == broker_object_name("a-b", "c")
    assert agg2["metadata"]["name"] == broker_object_name("a", "b-c")
    assert set(ports_of(agg1)) == {"one"} and set(ports_of(agg2)) == {"two"}
    labels1 = labels_of(agg1)
    assert labels1.get(SERVICE_NAME_LABEL) == "a-b" and labels1.get(SOURCE_NAMESPACE_LABEL) == "c"
    # Distinct ExportedServices and broker slices too.
    es1, es2 = await cs.exported_services("a-b", "c"), await cs.exported_services("a", "b-c")
    assert len(es1) == 1 and len(es2) == 1 and es1[0]["metadata"]["name"] != es2[0]["metadata"]["name"]
    assert es1[0]["metadata"]["name"] == broker_object_name("a-b", "c", "c1")
    for i in (1, 2):
        imp1 = await cs.wait_import(i, "a-b", "c", ["c1"])
        imp2 = await cs.wait_import(i, "a", "b-c", ["c1"])
        assert set(ports_of(imp1)) == {"one"} and set(ports_of(imp2)) == {"two"}
        assert (await _slices_from(cs, i, "a-b", "c", ["c1"]))["c1"]["ports"][0]["port"] == 81
        assert (await _slices_from(cs, i, "a", "b-c", ["c1"]))["c1"]["ports"][0]["port"] == 82


async def test_service_import_in_every_cluster_where_the_namespace_exists(cs: ClusterSet) -> None:
    ns = "i-later"
    await _ns_everywhere(cs, ns, [0, 1])  # not in c3
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    imp0 = await cs.wait_import(0, "web", ns, ["c1"])  # the exporter imports its own service too
    imp1 = await cs.wait_import(1, "web", ns, ["c1"])
    assert imp0["spec"]["type"] == imp1["spec"]["type"] == ServiceImportType.CLUSTER_SET_IP
    await never(lambda: cs.local_import(2, "web", ns), 1.0, what="import in a cluster without the namespace")

    # The namespace is created later: the import (and the exporter's slice) follow.
    await cs.ensure_namespace(2, ns)
    await cs.wait_import(2, "web", ns, ["c1"])
    await _slices_from(cs, 2, "web", ns, ["c1"])


async def test_import_spec_copies_the_aggregate(cs: ClusterSet) -> None:
    ns = "i-copy"
    await _ns_everywhere(cs, ns)
    svc = service(
        "sticky", ns, session_affinity="ClientIP", timeout_seconds=300, ports=[{"name": "web", "port": 8443}]
    )
    await cs.export(
        0, "sticky", ns, svc=svc, exported_labels={"tier": "web"}, exported_annotations={"team": "a"}
    )
    agg = await cs.wait_exported(0, "sticky", ns)
    for i in range(3):
        imp = await cs.wait_import(i, "sticky", ns, ["c1"])
        assert imp["spec"]["type"] == agg["spec"]["type"]
        assert imp["spec"]["ports"] == agg["spec"]["ports"]
        assert imp["spec"].get("sessionAffinity") == "ClientIP"
        assert imp["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] == 300
        assert labels_of(imp).get("tier") == "web", labels_of(imp)
        assert annotations_of(imp).get("team") == "a", annotations_of(imp)
        # broker bookkeeping labels stay on the broker
        assert SOURCE_NAMESPACE_LABEL not in labels_of(imp)


async def test_slices_from_every_exporting_cluster_next_to_the_import(cs: ClusterSet) -> None:
    """KEP-1645: every cluster that imports a service, the exporters included, has MCS EndpointSlices
    for it — one per exporting cluster, the exporter's own among them."""
    ns = "i-slices"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, cluster_ip="127.10.1.1"))
    await cs.export(1, "web", ns, svc=service("web", ns, cluster_ip="127.10.2.2"))
    await cs.wait_aggregate("web", ns, ["c1", "c2"])
    expected = {0: ["c1", "c2"], 1: ["c1", "c2"], 2: ["c1", "c2"]}
    cluster_ips = {"c1": "127.10.1.1", "c2": "127.10.2.2"}
    for i, sources in expected.items():
        imp = await cs.wait_import(i, "web", ns, ["c1", "c2"])
        slices = await _slices_from(cs, i, "web", ns, sources)
        for src, s in slices.items():
            labels = labels_of(s)
            assert labels[SERVICE_NAME_LABEL] == "web"
            assert labels[SOURCE_CLUSTER_LABEL] == src
            assert labels[MANAGED_BY_LABEL] == MANAGED_BY_VALUE
            assert KUBE_SERVICE_NAME_LABEL not in labels, (
                "imported slices must never attach to a local Service"
            )
            assert s["addressType"] == "IPv4"
            refs = s["metadata"].get("ownerReferences") or []
            assert len(refs) == 1, refs
            assert refs[0]["kind"] == "ServiceImport" and refs[0]["name"] == "web"
            assert refs[0]["uid"] == imp["metadata"]["uid"]
            assert refs[0]["apiVersion"].startswith("multicluster.x-k8s.io/")
            # No VIP: a single endpoint, the source cluster's ClusterIP, with the Service ports.
            assert addresses_of(s) == [cluster_ips[src]], s
            assert _endpoints(s)[0]["conditions"]["ready"] is True
            assert {p["port"] for p in s["ports"]} == {80}
    # The exporter's own MCS slice never takes kube's place: kube's own slice is untouched.
    kube = await get_or_none(cs.c(0), EndpointSlice, "web-kube1", ns)
    assert kube is not None and labels_of(kube)[MANAGED_BY_LABEL] == "endpointslice-controller.k8s.io"


async def test_an_imported_slice_and_its_broker_slice_share_their_endpoints_in_the_agents_cache(
        cs: ClusterSet) -> None:
    """The agent caches each imported slice twice (the broker's and the local copy): whichever came
    second holds the first's endpoints list itself, not an equal copy."""
    ns = "i-share"
    await _ns_everywhere(cs, ns, [0, 1])
    await cs.export(0, "web", ns, svc=service("web", ns, cluster_ip="127.10.3.3"))
    await cs.wait_import(1, "web", ns, ["c1"])
    await _slices_from(cs, 1, "web", ns, ["c1"])
    agent = cs.clusters[1].agent

    async def shared() -> tuple[Any, Any]:
        local = agent.slices.cache.get(f"{ns}/{imported_slice_name('web', 'c1')}")
        broker = agent.b_slices.cache.get(f"{BROKER_NS}/{broker_object_name('web', ns, 'c1')}")
        assert local is not None and broker is not None
        assert local.endpoints and local.endpoints[0].addresses == ["127.10.3.3"]
        assert local.endpoints is broker.endpoints
        return local, broker

    local, broker = await eventually(shared, what="one endpoints list for both cached slices")
    assert local.metadata.labels[SOURCE_CLUSTER_LABEL] == "c1"  # each keeps its own metadata
    assert SOURCE_NAMESPACE_LABEL in broker.metadata.labels and SOURCE_NAMESPACE_LABEL not in local.metadata.labels


async def test_clusterip_endpoint_ready_means_the_cluster_has_ready_endpoints(cs: ClusterSet) -> None:
    ns = "i-ready"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns, endpoints=[("127.20.0.1", False, None), ("127.20.0.2", False, None)])
    await cs.wait_exported(0, "web", ns)

    async def ready_in_c2(want: bool) -> bool:
        s = (await cs.imported_slices(1, "web", ns)).get("c1")
        assert s is not None, "no slice from c1"
        assert addresses_of(s) == ["127.10.0.5"], s
        return _endpoints(s)[0]["conditions"]["ready"] is want

    await eventually(lambda: ready_in_c2(False), what="ClusterIP endpoint not ready")
    await cs.put(0, endpoint_slice("web", ns, [("127.20.0.1", False, None), ("127.20.0.2", True, None)]))
    await eventually(lambda: ready_in_c2(True), what="ClusterIP endpoint ready once a pod is ready")
    await cs.delete(0, EndpointSlice, "web-kube1", ns)
    await eventually(lambda: ready_in_c2(False), what="ClusterIP endpoint not ready without endpoints")


async def test_vip_service_slices_carry_pod_ips(cs: ClusterSet) -> None:
    ns = "i-podips"
    await _ns_everywhere(cs, ns)
    await cs.export(
        0,
        "web",
        ns,
        use_clusterset_ip="true",
        endpoints=[("127.20.1.1", True, "web-0"), ("127.20.1.2", True, None), ("127.20.1.3", False, None)],
    )
    await cs.wait_exported(0, "web", ns)
    vip = await cs.vip_of("web", ns)
    for i in (1, 2):
        imp = await cs.wait_import(i, "web", ns, ["c1"])
        assert ips_of(imp) == [vip]

        async def pod_ips(i: int = i) -> dict[str, Any]:
            s = (await cs.imported_slices(i, "web", ns)).get("c1")
            assert s is not None
            eps = {e["addresses"][0]: e for e in _endpoints(s)}
            assert {"127.20.1.1", "127.20.1.2"} <= set(eps), eps
            assert "127.10.0.5" not in eps, "ClusterIP endpoint in a VIP service's slice"
            return s

        s = await eventually(pod_ips, what="pod IPs in the imported slice")
        eps = {e["addresses"][0]: e for e in _endpoints(s)}
        assert eps["127.20.1.1"]["conditions"]["ready"] is True
        assert eps["127.20.1.1"].get("hostname") == "web-0"
        assert eps["127.20.1.1"].get("nodeName") == "node-1"
        assert eps["127.20.1.1"].get("zone") == "zone-a"
        if "127.20.1.3" in eps:  # not-ready pods may be carried, but never as ready
            assert eps["127.20.1.3"]["conditions"]["ready"] is False
        # Pod IPs are reached on the target port.
        assert {(p.get("name"), p["port"]) for p in s["ports"]} == {("http", 8080)}


async def test_headless_slices_carry_pod_ips_and_hostnames(cs: ClusterSet) -> None:
    ns = "i-headless"
    await _ns_everywhere(cs, ns)
    await cs.export(
        0,
        "db",
        ns,
        svc=service("db", ns, headless=True, ports=[{"name": "pg", "port": 5432}]),
        endpoints=[("127.20.2.1", True, "db-0"), ("127.20.2.2", True, "db-1")],
        slice_ports=[{"name": "pg", "port": 5432}],
    )
    await cs.wait_exported(0, "db", ns)
    s = (await _slices_from(cs, 1, "db", ns, ["c1"]))["c1"]

    async def hosts() -> bool:
        s = (await cs.imported_slices(1, "db", ns))["c1"]
        got = {e["addresses"][0]: e.get("hostname") for e in _endpoints(s)}
        assert got == {"127.20.2.1": "db-0", "127.20.2.2": "db-1"}, got
        return True

    await eventually(hosts)
    assert s["ports"][0]["port"] == 5432


async def test_service_port_change_propagates(cs: ClusterSet) -> None:
    ns = "i-ports"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    await cs.wait_import(2, "web", ns, ["c1"])
    svc = service(
        "web", ns, ports=[{"name": "http", "port": 80, "targetPort": 8080}, {"name": "grpc", "port": 9090}]
    )
    await cs.put(0, svc)

    async def both_ports(i: int) -> bool:
        imp = await cs.local_import(i, "web", ns)
        assert imp is not None and set(ports_of(imp)) == {"http", "grpc"}, ports_of(imp)
        s = (await cs.imported_slices(i, "web", ns)).get("c1") if i else None
        if i:
            assert s is not None and {p["port"] for p in s["ports"]} == {80, 9090}, s
        return True

    agg = await eventually(lambda: cs.broker_import("web", ns))
    for i in range(3):
        await eventually(lambda i=i: both_ports(i), what=f"new port in {cs.clusters[i].id}")
    agg = await cs.broker_import("web", ns)
    assert set(ports_of(agg)) == {"http", "grpc"}

    # and removing it again
    await cs.put(0, service("web", ns))

    async def one_port() -> bool:
        imp = await cs.local_import(2, "web", ns)
        assert imp is not None and set(ports_of(imp)) == {"http"}, ports_of(imp)
        return True

    await eventually(one_port)


async def test_endpoint_changes_propagate(cs: ClusterSet) -> None:
    ns = "i-eps"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns, use_clusterset_ip="true", endpoints=[("127.20.3.1", True, None)])
    await cs.wait_exported(0, "web", ns)

    async def addrs(want: list[str]) -> bool:
        for i in (1, 2):
            s = (await cs.imported_slices(i, "web", ns)).get("c1")
            assert s is not None
            ready = sorted(e["addresses"][0] for e in _endpoints(s) if e["conditions"].get("ready"))
            assert ready == want, f"{cs.clusters[i].id}: {ready} want {want}"
        return True

    await eventually(lambda: addrs(["127.20.3.1"]))
    await cs.put(0, endpoint_slice("web", ns, [("127.20.3.1", True, None), ("127.20.3.2", True, None)]))
    await eventually(lambda: addrs(["127.20.3.1", "127.20.3.2"]), what="pod added")
    await cs.put(0, endpoint_slice("web", ns, [("127.20.3.2", True, None)]))
    await eventually(lambda: addrs(["127.20.3.2"]), what="pod removed")


async def test_service_recreated_headless_changes_type_everywhere(cs: ClusterSet) -> None:
    ns = "i-retype"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns, endpoints=[("127.20.4.1", True, "web-0")])
    await cs.wait_exported(0, "web", ns)
    await cs.wait_import(1, "web", ns, ["c1"])
    # clusterIP is immutable in kube: ClusterIP → headless means delete and recreate the Service.
    await cs.delete(0, Service, "web", ns)
    await cs.put(0, service("web", ns, headless=True))

    async def headless() -> bool:
        imp = await cs.local_import(1, "web", ns)
        assert imp is not None and imp["spec"]["type"] == ServiceImportType.HEADLESS, imp
        s = (await cs.imported_slices(1, "web", ns)).get("c1")
        assert s is not None and addresses_of(s) == ["127.20.4.1"], s
        return True

    await eventually(headless, what="import became Headless with pod IPs")
    await cs.wait_condition(0, "web", ns, ConditionType.READY, "True")


async def test_unexport_by_the_last_cluster_cleans_up_everything(cs: ClusterSet) -> None:
    ns = "i-unexport"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns, use_clusterset_ip="true")
    await cs.wait_exported(0, "web", ns)
    await cs.vip_of("web", ns)
    for i in (1, 2):
        await _slices_from(cs, i, "web", ns, ["c1"])
    await cs.unexport(0, "web", ns)

    async def clean() -> bool:
        assert await cs.broker_import("web", ns) is None, "aggregate left"
        assert await cs.exported_services("web", ns) == [], "ExportedService left"
        assert await cs.broker_slices("web", ns) == [], "broker slice left"
        for i in range(3):
            assert await cs.local_import(i, "web", ns) is None, f"import left in {cs.clusters[i].id}"
            assert await cs.imported_slices(i, "web", ns) == {}, f"slices left in {cs.clusters[i].id}"
        return True

    await eventually(clean, what="everything cleaned after the last unexport")
    # the user's own objects stay
    assert await get_or_none(cs.c(0), Service, "web", ns) is not None
    assert await get_or_none(cs.c(0), EndpointSlice, "web-kube1", ns) is not None


async def test_service_deletion_cleans_up_everything(cs: ClusterSet) -> None:
    ns = "i-svcdel"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns)
    await cs.export(1, "web", ns)
    await cs.wait_aggregate("web", ns, ["c1", "c2"])
    await _slices_from(cs, 2, "web", ns, ["c1", "c2"])
    await cs.delete(0, Service, "web", ns)
    await cs.wait_condition(0, "web", ns, ConditionType.VALID, "False", ValidReason.NO_SERVICE)
    await cs.wait_aggregate("web", ns, ["c2"])
    await _slices_from(cs, 2, "web", ns, ["c2"])
    await _slices_from(cs, 0, "web", ns, ["c2"])  # c1 still imports c2's service
    await cs.delete(1, Service, "web", ns)

    async def clean() -> bool:
        assert await cs.broker_import("web", ns) is None
        assert await cs.exported_services("web", ns) == []
        assert await cs.broker_slices("web", ns) == []
        for i in range(3):
            assert await cs.local_import(i, "web", ns) is None
            assert await cs.imported_slices(i, "web", ns) == {}
        return True

    await eventually(clean, what="everything cleaned after both Services were deleted")
    assert await cs.get_export(0, "web", ns) is not None  # the user's ServiceExport is theirs


async def test_unexport_by_one_cluster_recomputes_ports_and_clusters(cs: ClusterSet) -> None:
    ns = "i-partial"
    await _ns_everywhere(cs, ns)
    ports = [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "admin", "port": 9000}]
    await cs.export(0, "web", ns, svc=service("web", ns, ports=ports, cluster_ip="127.10.3.1"))
    await cs.export(1, "web", ns, svc=service("web", ns, cluster_ip="127.10.3.2"))
    agg = await cs.wait_aggregate("web", ns, ["c1", "c2"])
    assert set(ports_of(agg)) == {"http", "admin"}
    await _slices_from(cs, 2, "web", ns, ["c1", "c2"])
    await cs.unexport(0, "web", ns)
    agg = await cs.wait_aggregate("web", ns, ["c2"])

    async def recomputed() -> bool:
        agg = await cs.broker_import("web", ns)
        assert agg is not None and set(ports_of(agg)) == {"http"}, ports_of(agg)
        for i in range(3):
            imp = await cs.local_import(i, "web", ns)
            assert imp is not None and clusters_of(imp) == ["c2"] and set(ports_of(imp)) == {"http"}
        return True

    await eventually(recomputed, what="ports and clusters recomputed")
    await _slices_from(cs, 2, "web", ns, ["c2"])
    await _slices_from(cs, 0, "web", ns, ["c2"])
    await _slices_from(cs, 1, "web", ns, ["c2"])  # the exporter imports its own endpoints too
    assert len(await cs.exported_services("web", ns)) == 1
    assert len(await cs.broker_slices("web", ns)) == 1


async def test_broker_objects_are_labelled_and_owned_per_contract(cs: ClusterSet) -> None:
    ns = "i-broker"
    await _ns_everywhere(cs, ns, [0])
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    cluster = as_dict(cs.clusters[0].cluster)
    es = await cs.exported_services("web", ns)
    bs = await cs.broker_slices("web", ns)
    assert len(es) == 1 and len(bs) == 1
    for obj in es + bs:
        assert obj["metadata"]["name"] == broker_object_name("web", ns, "c1")
        assert obj["metadata"]["namespace"] == BROKER_NS
        labels = labels_of(obj)
        assert labels[SERVICE_NAME_LABEL] == "web"
        assert labels[SOURCE_NAMESPACE_LABEL] == ns
        assert labels[SOURCE_CLUSTER_LABEL] == "c1"
        refs = obj["metadata"].get("ownerReferences") or []
        assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [
            ("Cluster", "c1", cluster["metadata"]["uid"])
        ], refs
    assert KUBE_SERVICE_NAME_LABEL not in labels_of(bs[0])
    assert es[0]["spec"]["cluster"] == "c1" and es[0]["spec"]["serviceNamespace"] == ns
    # No aggregate is stored on the broker (docs/discovery.md "Broker tenancy"): every agent derives it
    # from the ExportedServices, which carry the VIP as each cluster holds it.
    assert await get_or_none(cs.broker_client, SI, broker_object_name("web", ns), BROKER_NS) is None
    assert "clustersetIPs" in es[0]["spec"]
    se = await get_or_none(cs.c(0), SE, "web", ns)
    assert se is not None


async def test_exported_label_changes_propagate_to_imports(cs: ClusterSet) -> None:
    ns = "i-labels"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns, exported_labels={"tier": "web"})
    await cs.wait_exported(0, "web", ns)
    await cs.patch(0, SE, "web", ns, {"spec": {"exportedLabels": {"tier": "api", "env": "prod"}}})

    async def updated() -> bool:
        for i in range(3):
            labels = labels_of(await cs.local_import(i, "web", ns))
            assert labels.get("tier") == "api" and labels.get("env") == "prod", labels
        return True

    await eventually(updated, what="changed exportedLabels on every import")
    await cs.patch(0, SE, "web", ns, {"spec": {"exportedLabels": None}})

    async def removed() -> bool:
        labels = labels_of(await cs.local_import(1, "web", ns))
        assert "tier" not in labels and "env" not in labels, labels
        return True

    await eventually(removed, what="removed exportedLabels gone from imports")


async def test_local_copies_are_restored_when_tampered_with(cs: ClusterSet) -> None:
    ns = "i-tamper"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    imp = await cs.wait_import(1, "web", ns, ["c1"])
    s = (await _slices_from(cs, 1, "web", ns, ["c1"]))["c1"]
    assert s["metadata"]["name"] == imported_slice_name("web", "c1")
    # someone deletes the imported slice: it comes back
    await cs.delete(1, EndpointSlice, s["metadata"]["name"], ns)
    await _slices_from(cs, 1, "web", ns, ["c1"])
    # someone edits the local ServiceImport: reverted to the aggregate
    await cs.patch(1, SI, "web", ns, {"spec": {"ports": [{"name": "evil", "port": 6666, "protocol": "TCP"}]}})

    async def reverted() -> bool:
        cur = await cs.local_import(1, "web", ns)
        assert cur is not None and set(ports_of(cur)) == {"http"}, ports_of(cur)
        return True

    await eventually(reverted, what="local ServiceImport edit reverted")
    # someone deletes the local ServiceImport: recreated, with its slices
    await cs.delete(1, SI, "web", ns)

    async def recreated() -> bool:
        cur = await cs.local_import(1, "web", ns)
        assert cur is not None and cur["metadata"]["uid"] != imp["metadata"]["uid"]
        s = (await cs.imported_slices(1, "web", ns)).get("c1")
        assert s is not None
        assert [r["uid"] for r in s["metadata"].get("ownerReferences") or []] == [cur["metadata"]["uid"]]
        return True

    await eventually(recreated, what="local ServiceImport recreated with its slice")


async def test_import_follows_the_namespace_being_deleted_and_recreated(cs: ClusterSet) -> None:
    ns = "i-nscycle"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns)
    await cs.wait_exported(0, "web", ns)
    await cs.wait_import(2, "web", ns, ["c1"])
    await cs.c(2).delete(Namespace, ns)

    async def ns_gone() -> bool:
        return await get_or_none(cs.c(2), Namespace, ns) is None

    await eventually(ns_gone, what="namespace deleted in c3")
    assert await cs.broker_import("web", ns) is not None, "a namespace deleted elsewhere must not unexport"
    await cs.ensure_namespace(2, ns)
    await cs.wait_import(2, "web", ns, ["c1"])
    await _slices_from(cs, 2, "web", ns, ["c1"])


async def test_exported_service_records_the_export(cs: ClusterSet) -> None:
    ns = "i-view"
    await _ns_everywhere(cs, ns, [0])
    svc = service(
        "web", ns, session_affinity="ClientIP", timeout_seconds=60, ports=[{"name": "h", "port": 81}]
    )
    await cs.export(0, "web", ns, svc=svc, use_clusterset_ip="true", exported_labels={"x": "y"})
    await cs.wait_exported(0, "web", ns)
    se = await cs.get_export(0, "web", ns)
    (es,) = await cs.exported_services("web", ns)
    spec = es["spec"]
    assert spec["cluster"] == "c1" and spec["serviceName"] == "web" and spec["serviceNamespace"] == ns
    assert spec["type"] == ServiceImportType.CLUSTER_SET_IP
    assert [(p.get("name"), p["port"]) for p in spec["ports"]] == [("h", 81)]
    assert spec.get("sessionAffinity") == "ClientIP"
    assert spec.get("clustersetIPEnabled") is True
    assert spec["exportCreationTimestamp"] == se["metadata"]["creationTimestamp"]
    assert spec.get("exportedLabels") == {"x": "y"}


async def test_every_kube_slice_of_the_service_is_exported_ipv4_only(cs: ClusterSet) -> None:
    ns = "i-multislice"
    await _ns_everywhere(cs, ns)
    await cs.export(0, "web", ns, use_clusterset_ip="true", endpoints=[("127.20.6.1", True, None)])
    await cs.put(0, endpoint_slice("web", ns, [("127.20.6.2", True, None)], name="web-kube2"))
    v6 = endpoint_slice("web", ns, [("fd00::1", True, None)], name="web-kube6")
    v6.addressType = "IPv6"
    await cs.put(0, v6)
    await cs.wait_exported(0, "web", ns)

    async def merged() -> bool:
        s = (await cs.imported_slices(1, "web", ns)).get("c1")
        assert s is not None
        assert addresses_of(s) == ["127.20.6.1", "127.20.6.2"], addresses_of(s)
        assert s["addressType"] == "IPv4"
        return True

    await eventually(merged, what="endpoints of every kube slice, IPv4 only")
