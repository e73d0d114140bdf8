"""MultiClusterService end to end in one process: a broker and three members (embedded apiservers),
every member's discovery agent and exposure controller under its own broker credentials, and the
broker controller with the `fake` load-balancer provider (the seed's tests run on it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lightkube import ApiError
from lightkube.resources.core_v1 import Event, Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.mcs import AFFINITY_ANNOTATION, CONSUMER_CLUSTERS_ANNOTATION, EXPORTED_PORTS_ANNOTATION
from isthmus.api.mcsvc import (
    FINALIZER,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MultiClusterServiceReport,
    report_name,
)
from isthmus.clusterset.membership import membership
from isthmus.kube.resources import resource_for
from tests.harness.clusterset import (
    ClusterSet,
    as_dict,
    endpoint_slice,
    service,
    service_export,
)
from tests.harness.exposure import MCS, NS, Exposure, _mcs, _serve
from tests.harness.polling import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")
REPORT: Any = resource_for(MultiClusterServiceReport)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[ClusterSet, Exposure]]:
    async with ClusterSet(tmp_path_factory.mktemp("mcsvc"), n=3) as cs:
        for i in range(3):
            await cs.ensure_namespace(i, NS)
        for ns in (NS, "isthmus-system"):  # the broker controller's Lease lives in isthmus-system
            await cs.broker_client.create(Namespace.from_dict({"metadata": {"name": ns}}))
        ex = Exposure(cs)
        await ex.start()
        try:
            yield cs, ex
        finally:
            await ex.stop()


async def _get_mcs(cs: ClusterSet, name: str) -> dict[str, Any] | None:
    try:
        return as_dict(await cs.broker_client.get(MCS, name, namespace=NS))
    except Exception:
        return None


def _cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


async def _events(cs: ClusterSet, name: str) -> list[tuple[str, str, str]]:
    out = []
    async for e in cs.broker_client.list(Event, namespace=NS):
        if e.involvedObject.name == name and e.involvedObject.kind == "MultiClusterService":
            out.append((e.type or "", e.reason or "", e.message or ""))
    return out


async def test_cross_cluster_providers_export_and_only_consumers_import(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    for i in (0, 1):
        await _serve(cs, i, "web", f"127.{101 + i}.0.10")
    await _mcs(cs, "web", {"types": ["CrossCluster"], "ports": [{"port": 80}],
                           "providerClusters": [{"name": "c1"}, {"name": "c2"}],
                           "consumerClusters": [{"name": "c3"}]}, {AFFINITY_ANNOTATION: "local"})

    async def ready() -> dict[str, Any]:
        obj = await _get_mcs(cs, "web")
        assert _cond(obj, "Ready").get("status") == "True", _cond(obj, "Ready")
        return obj or {}

    obj = await eventually(ready, timeout=20)
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert obj["status"]["providers"] == "c1,c2" and obj["status"]["consumers"] == "c3"
    assert _cond(obj, "ServiceApplied")["status"] == "True"
    assert _cond(obj, "EndpointSliceDispatched")["status"] == "True"
    assert not _cond(obj, "LoadBalancerReady")
    for i in (0, 1):  # the providers' exports: made by the MultiClusterService, narrowed to c3 and port 80
        export = await cs.get_export(i, "web", NS)
        assert export is not None
        assert export["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY_VALUE
        assert export["metadata"]["annotations"][CONSUMER_CLUSTERS_ANNOTATION] == "c3"
        assert export["metadata"]["annotations"][EXPORTED_PORTS_ANNOTATION] == "80"
        assert export["spec"]["exportedAnnotations"] == {AFFINITY_ANNOTATION: "local"}
    assert await cs.get_export(2, "web", NS) is None
    imported = await cs.local_import(2, "web", NS)
    assert imported is not None
    assert [p["port"] for p in imported["spec"]["ports"]] == [80]  # metrics (9090) is not exposed
    assert imported["metadata"]["annotations"][AFFINITY_ANNOTATION] == "local"
    assert sorted(c["cluster"] for c in imported["status"]["clusters"]) == ["c1", "c2"]
    slices = await cs.imported_slices(2, "web", NS)
    assert len(slices) == 2
    assert all([p["name"] for p in s["ports"]] == ["http"] for s in slices.values())
    for i in (0, 1):  # providers that are not consumers do not import it
        await asyncio.sleep(0.3)
        assert await cs.local_import(i, "web", NS) is None


async def test_missing_service_is_retried_and_proceeds_when_it_appears(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    await _serve(cs, 0, "late", "127.101.0.20")
    await _mcs(cs, "late", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}, {"name": "c2"}],
                            "consumerClusters": [{"name": "c3"}]})

    async def failing() -> dict[str, Any]:
        c = _cond(await _get_mcs(cs, "late"), "ServiceApplied")
        assert c.get("status") == "False" and "c2" in c["message"] and "retrying" in c["message"], c
        return c

    await eventually(failing, timeout=20)
    assert any(t == "Warning" and r == "SyncServiceFailed" and "c2" in m for t, r, m in await _events(cs, "late"))
    await _serve(cs, 1, "late", "127.102.0.20")

    async def applied() -> bool:
        obj = await _get_mcs(cs, "late")
        assert _cond(obj, "ServiceApplied").get("status") == "True", _cond(obj, "ServiceApplied")
        assert _cond(obj, "Ready").get("status") == "True", _cond(obj, "Ready")
        return True

    await eventually(applied, timeout=20)
    imported = await eventually(lambda: cs.local_import(2, "late", NS), timeout=10)
    assert sorted(c["cluster"] for c in imported["status"]["clusters"]) == ["c1", "c2"]


async def test_unknown_cluster_is_warned_and_ignored(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    await _serve(cs, 0, "ghost", "127.101.0.30")
    await _mcs(cs, "ghost", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}, {"name": "c9"}],
                             "consumerClusters": [{"name": "c2"}]})

    async def warned() -> bool:
        events = await _events(cs, "ghost")
        assert any(r == "ClusterNotFound" and "c9" in m for _, r, m in events), events
        return True

    await eventually(warned, timeout=20)
    await eventually(lambda: cs.local_import(1, "ghost", NS), timeout=20)
    obj = await _get_mcs(cs, "ghost")
    assert obj is not None and obj["status"]["providers"] == "c1"


async def test_a_port_the_service_lacks_is_refused_and_nothing_changes(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    await _serve(cs, 0, "narrow", "127.101.0.40")
    await _mcs(cs, "narrow", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}]})
    await eventually(lambda: cs.get_export(0, "narrow", NS), timeout=20)

    async def settled() -> dict[str, Any] | None:
        """The export once the agent has written its status too (unchanged over half a second)."""
        first = await cs.get_export(0, "narrow", NS)
        await asyncio.sleep(0.5)
        second = await cs.get_export(0, "narrow", NS)
        same = first and second and first["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
        return second if same else None

    before = await eventually(settled, timeout=20)
    await _mcs(cs, "narrow", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}],
                              "ports": [{"name": "grpc", "port": 50051}]})

    async def refused() -> dict[str, Any]:
        c = _cond(await _get_mcs(cs, "narrow"), "ServiceApplied")
        assert c.get("status") == "False" and "grpc:50051" in c["message"], c
        return c

    await eventually(refused, timeout=20)
    after = await cs.get_export(0, "narrow", NS)
    assert after is not None and after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_a_users_own_export_is_used_and_never_touched(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    for i in (0, 1):
        await _serve(cs, i, "shared", f"127.{101 + i}.0.50")
    await cs.put(0, service_export("shared", NS))  # the user's own, in c1
    await _mcs(cs, "shared", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}, {"name": "c2"}]})

    async def both() -> dict[str, Any]:
        obj = await _get_mcs(cs, "shared")
        reports = {r["name"]: r for r in (obj or {}).get("status", {}).get("clusters", [])}
        assert reports.get("c1", {}).get("export") == "User" and reports.get("c2", {}).get("export") == \
            "MultiClusterService", reports
        return obj or {}

    await eventually(both, timeout=20)
    user = await cs.get_export(0, "shared", NS)
    assert user is not None and MANAGED_BY_LABEL not in (user["metadata"].get("labels") or {})
    await cs.broker_client.delete(MCS, "shared", namespace=NS)
    await eventually(lambda: _true_async(_get_mcs(cs, "shared"), None), timeout=20)
    await eventually(lambda: _true_async(cs.get_export(1, "shared", NS), None), timeout=10)  # ours: gone
    assert await cs.get_export(0, "shared", NS) is not None  # the user's: kept


async def _true_async(coro: Any, expected: Any) -> bool:
    return (await coro) == expected


async def test_load_balancer_with_the_fake_provider_and_type_changes(env: tuple[ClusterSet, Exposure]) -> None:
    cs, ex = env
    for i in (0, 1):
        await _serve(cs, i, "shop", f"127.{101 + i}.0.60")
    await _mcs(cs, "shop", {"types": ["LoadBalancer"], "ports": [{"port": 80}],
                            "providerClusters": [{"name": "c1"}, {"name": "c2"}]})

    async def balanced() -> dict[str, Any]:
        obj = await _get_mcs(cs, "shop")
        assert _cond(obj, "LoadBalancerReady").get("status") == "True", obj and obj.get("status")
        servers = ex.fake.backends[f"{NS}/shop"].servers.get("http", [])
        assert sorted(s.address for s in servers) == ["127.101.0.60", "127.102.0.60"], servers
        return obj or {}

    obj = await eventually(balanced, timeout=20)
    assert obj["status"]["loadBalancer"]["ingress"][0]["hostname"] == "shop.shop.fake-lb.invalid"
    assert obj["status"]["address"] == "shop.shop.fake-lb.invalid"
    assert all(p[1] == 80 for p in ex.fake.backends[f"{NS}/shop"].ports)
    assert await cs.get_export(0, "shop", NS) is None  # LoadBalancer alone exports nothing
    # An endpoint change in a provider reaches the load balancer's backends.
    await cs.put(0, endpoint_slice("shop", NS, endpoints=[("127.101.0.61", True)],
                                   ports=[{"name": "http", "port": 8080}]))

    async def moved() -> bool:
        servers = ex.fake.backends[f"{NS}/shop"].servers.get("http", [])
        assert sorted(s.address for s in servers) == ["127.101.0.61", "127.102.0.60"], servers
        return True

    await eventually(moved, timeout=20)
    # LoadBalancer → CrossCluster: the load balancer is deleted, the exports appear.
    await _mcs(cs, "shop", {"types": ["CrossCluster"], "ports": [{"port": 80}],
                            "providerClusters": [{"name": "c1"}, {"name": "c2"}]})

    async def crossed() -> bool:
        obj = await _get_mcs(cs, "shop")
        assert (obj or {}).get("status", {}).get("loadBalancer") is None, obj
        assert not _cond(obj, "LoadBalancerReady")
        assert f"{NS}/shop" not in ex.fake.balancers
        assert await cs.get_export(0, "shop", NS) is not None
        return True

    await eventually(crossed, timeout=20)
    assert ("ensure_deleted", f"{NS}/shop") in ex.fake.calls
    # ... and back: the exports go, the load balancer returns.
    await _mcs(cs, "shop", {"types": ["LoadBalancer"], "ports": [{"port": 80}],
                            "providerClusters": [{"name": "c1"}, {"name": "c2"}]})

    async def back() -> bool:
        obj = await _get_mcs(cs, "shop")
        assert _cond(obj, "LoadBalancerReady").get("status") == "True"
        assert await cs.get_export(0, "shop", NS) is None and await cs.get_export(1, "shop", NS) is None
        return True

    await eventually(back, timeout=20)
    # Delete: the finalizer holds until every member removed its collected slice; then it is gone.
    await cs.broker_client.delete(MCS, "shop", namespace=NS)
    await eventually(lambda: _true_async(_get_mcs(cs, "shop"), None), timeout=20)
    leftovers = [s async for s in cs.broker_client.list(EndpointSlice, namespace="isthmus-broker",
                                                         labels={"isthmus.io/multiclusterservice": "shop"})]
    assert leftovers == []
    assert f"{NS}/shop" not in ex.fake.balancers


async def test_provider_failure_is_a_warning_with_the_cause(env: tuple[ClusterSet, Exposure]) -> None:
    cs, ex = env
    await _serve(cs, 0, "broken", "127.101.0.70")
    ex.fake.fail[f"{NS}/broken"] = "quota exceeded: ask your cloud admin for more load balancers"
    await _mcs(cs, "broken", {"types": ["LoadBalancer"], "providerClusters": [{"name": "c1"}]})

    async def failed() -> bool:
        c = _cond(await _get_mcs(cs, "broken"), "LoadBalancerReady")
        assert c.get("status") == "False" and "quota exceeded" in c["message"], c
        events = await _events(cs, "broken")
        assert any(t == "Warning" and r == "SyncLoadBalancerFailed" for t, r, _ in events), events
        return True

    await eventually(failed, timeout=20)
    ex.fake.fail.clear()

    async def recovered() -> bool:
        assert _cond(await _get_mcs(cs, "broken"), "LoadBalancerReady").get("status") == "True"
        return True

    await eventually(recovered, timeout=20)


async def test_clusters_left_out_of_the_providers_are_cleaned_up(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    for i in (0, 1):
        await _serve(cs, i, "shrink", f"127.{101 + i}.0.80")
    await _mcs(cs, "shrink", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}, {"name": "c2"}]})
    await eventually(lambda: cs.get_export(1, "shrink", NS), timeout=20)
    await _mcs(cs, "shrink", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}]})
    await eventually(lambda: _true_async(cs.get_export(1, "shrink", NS), None), timeout=20)
    assert await cs.get_export(0, "shrink", NS) is not None
    service_left = await cs.c(1).get(Service, "shrink", namespace=NS)
    assert service_left is not None  # the Service itself is the user's: never touched


async def test_a_consumer_without_the_namespace_says_so(env: tuple[ClusterSet, Exposure]) -> None:
    cs, _ = env
    ns = "lonely"
    await cs.ensure_namespace(0, ns)
    await cs.broker_client.create(Namespace.from_dict({"metadata": {"name": ns}}))
    await cs.put(0, service("solo", ns, cluster_ip="127.201.0.99"))
    await cs.broker_client.apply(MCS.from_dict({
        "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "solo", "namespace": ns},
        "spec": {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}], "consumerClusters": [{"name": "c2"}]}}),
        field_manager="test", force=True)

    async def explained() -> bool:
        obj = as_dict(await cs.broker_client.get(MCS, "solo", namespace=ns))
        c = _cond(obj, "EndpointSliceDispatched")
        assert c.get("status") == "False" and "namespace lonely does not exist in cluster c2" in c["message"], c
        return True

    await eventually(explained, timeout=20)
    await cs.ensure_namespace(1, ns)

    async def imported() -> bool:
        obj = as_dict(await cs.broker_client.get(MCS, "solo", namespace=ns))
        assert _cond(obj, "EndpointSliceDispatched").get("status") == "True", _cond(obj, "EndpointSliceDispatched")
        return True

    await eventually(imported, timeout=20)


async def test_default_providers_are_the_clusters_that_have_the_service(env: tuple[ClusterSet, Exposure]) -> None:
    """Issue 40 item 15: CrossCluster, consumers `range.clusterNames: [c3]`, providers left to default.
    c1 and c2 serve, c3 only imports: c3 lacking the Service is no failure, and Ready becomes True
    (before: `Ready=False ServiceAppliedFailed` forever, "Service shop/dflt does not exist in cluster
    c3; retrying")."""
    cs, _ = env
    for i in (0, 1):
        await _serve(cs, i, "dflt", f"127.{101 + i}.0.95")
    await _mcs(cs, "dflt", {"types": ["CrossCluster"], "range": {"clusterNames": ["c3"]}})

    async def ready() -> dict[str, Any]:
        obj = await _get_mcs(cs, "dflt")
        assert _cond(obj, "Ready").get("status") == "True", _cond(obj, "Ready")
        return obj or {}

    obj = await eventually(ready, timeout=20)
    assert obj["status"]["providers"] == "* (c1,c2)" and obj["status"]["consumers"] == "c3"
    assert "c1, c2" in _cond(obj, "ServiceApplied")["message"]
    reports = {r["name"]: r for r in obj["status"]["clusters"]}
    assert reports["c3"]["provider"] is False and reports["c3"]["reason"] == "NoService"
    assert "serviceApplied" not in reports["c3"]
    assert await cs.get_export(2, "dflt", NS) is None  # c3 exports nothing
    imported = await cs.local_import(2, "dflt", NS)
    assert imported is not None and sorted(c["cluster"] for c in imported["status"]["clusters"]) == ["c1", "c2"]
    assert not any(t == "Warning" and "c3" in m for t, _, m in await _events(cs, "dflt"))
    # A cluster named as a provider that lacks the Service is still a failed provider.
    await _mcs(cs, "dflt", {"types": ["CrossCluster"], "range": {"clusterNames": ["c3"]},
                            "providerClusters": [{"name": "c1"}, {"name": "c3"}]})

    async def failed() -> bool:
        c = _cond(await _get_mcs(cs, "dflt"), "ServiceApplied")
        assert c.get("reason") == "ServiceAppliedFailed" and "c3" in c["message"], c
        return True

    await eventually(failed, timeout=20)


async def test_a_members_broker_token_cannot_write_a_multiclusterservices_status(
        env: tuple[ClusterSet, Exposure]) -> None:
    """Issue 40 item 1: c3's own broker credentials (the ones `isthmus join` gave it) cannot rewrite
    a MultiClusterService's status (before: the patch was accepted and `kubectl get mcs` showed the
    forged address), nor another cluster's report; and a status write by anyone else (here the
    broker's admin) is undone by the broker controller."""
    cs, _ = env
    for i in (0, 1):
        await _serve(cs, i, "cart", f"127.{101 + i}.0.96")
    await _mcs(cs, "cart", {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}, {"name": "c2"}]})

    async def ready() -> dict[str, Any]:
        obj = await _get_mcs(cs, "cart")
        assert _cond(obj, "Ready").get("status") == "True", _cond(obj, "Ready")
        return obj or {}

    before = await eventually(ready, timeout=20)
    _, info = await membership(cs.c(2))
    c3 = info.client()
    forged = {"status": {"address": "127.33.6.6", "loadBalancer": {"ingress": [{"ip": "127.33.6.6"}]}}}
    with pytest.raises(ApiError) as denied:
        await c3.patch(MCS.Status, "cart", forged, namespace=NS, patch_type=PatchType.MERGE)
    assert denied.value.status.code == 403
    # Nor can it rewrite c1's report (the admission policy: only objects labelled with its own ID).
    report = await cs.broker_client.get(REPORT, report_name(NS, "cart", "c1"), namespace=info.namespace)
    with pytest.raises(ApiError) as refused:
        await c3.patch(REPORT, report.metadata.name, {"spec": {"report": {"serviceApplied": False}}},
                       namespace=info.namespace, patch_type=PatchType.MERGE)
    assert refused.value.status.code == 403
    with pytest.raises(ApiError) as refused:
        await c3.delete(REPORT, report.metadata.name, namespace=info.namespace)
    assert refused.value.status.code == 403
    # Whoever else writes the status (an admin here), the broker controller restores it.
    await cs.broker_client.patch(MCS.Status, "cart", {"status": {**forged["status"], "conditions": [
        {"type": "Ready", "status": "False", "reason": "Forged", "message": "x",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, namespace=NS, patch_type=PatchType.MERGE)

    async def restored() -> bool:
        obj = await _get_mcs(cs, "cart")
        status = (obj or {}).get("status") or {}
        assert "address" not in status and "loadBalancer" not in status, status
        assert _cond(obj, "Ready").get("status") == "True", _cond(obj, "Ready")
        assert [r["name"] for r in status["clusters"]] == [r["name"] for r in before["status"]["clusters"]]
        return True

    await eventually(restored, timeout=10)


async def test_a_cluster_that_leaves_is_cleaned_up(env: tuple[ClusterSet, Exposure]) -> None:
    """Last in this module: c3 leaves the clusterset."""
    cs, _ = env
    await _serve(cs, 2, "leaver", "127.103.0.90")
    await cs.put(2, service_export("mine", NS))  # a user's own export in c3: leave keeps it
    await _mcs(cs, "leaver", {"types": ["CrossCluster"], "providerClusters": [{"name": "c3"}]})
    await eventually(lambda: cs.get_export(2, "leaver", NS), timeout=20)
    await cs.leave(2)  # c3's controller keeps running, with a revoked broker token and a stale cache
    assert await cs.get_export(2, "leaver", NS) is None  # made by the MultiClusterService: gone with c3
    await asyncio.sleep(1.0)
    assert await cs.get_export(2, "leaver", NS) is None  # and not made again
    assert await cs.get_export(2, "mine", NS) is not None  # the user's: kept

    async def forgotten() -> bool:
        obj = await _get_mcs(cs, "leaver")
        names = [r["name"] for r in (obj or {}).get("status", {}).get("clusters", [])]
        assert "c3" not in names, names
        assert _cond(obj, "ServiceApplied").get("status") == "False"  # no provider left
        return True

    await eventually(forgotten, timeout=20)
