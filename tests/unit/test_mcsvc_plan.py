"""Exposure's pure logic: exposed ports, backends from collected slices, the broker's summary, the
haproxy provider's pool, and discovery's reading of the annotations the member controller writes."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.resources.core_v1 import Service

from isthmus.api.lb import LoadBalancerPool
from isthmus.api.mcsvc import (
    SERVICE_PORTS_ANNOTATION,
    ClusterReport,
    ExposurePort,
    MultiClusterService,
    collected_slice_name,
    parse_service_ports,
    pool_name,
    port_selector,
    resolve,
)
from isthmus.discovery.endpoints import InvalidAnnotation, consumer_clusters, exported_ports, port_selected
from isthmus.exposure.haproxy import pool_spec, status_of
from isthmus.exposure.plan import (
    backends,
    exposed_ports,
    missing_ports,
    resolve_providers,
    show_clusters,
    summarize,
)
from isthmus.exposure.views import mcs_rows


def svc(*ports: tuple[str, int, str]) -> Service:
    return Service.from_dict({"metadata": {"name": "web", "namespace": "shop"},
                              "spec": {"ports": [{"name": n, "port": p, "protocol": pr} for n, p, pr in ports]}})


def test_ports_exposed_and_missing() -> None:
    s = svc(("http", 80, "TCP"), ("metrics", 9090, "TCP"))
    assert exposed_ports(None, s) == [("http", 80, "TCP"), ("metrics", 9090, "TCP")]
    assert exposed_ports([ExposurePort(port=80)], s) == [("http", 80, "TCP")]
    assert missing_ports([ExposurePort(name="grpc", port=80), ExposurePort(port=443)], s) == ["grpc:80", "443"]
    assert missing_ports([ExposurePort(name="http", port=80)], s) == []


def test_discovery_reads_the_annotations_the_controller_writes() -> None:
    sel = port_selector([ExposurePort(port=80), ExposurePort(name="https", port=443)])
    assert sel == "80,https:443"
    parsed = exported_ports({"isthmus.io/exported-ports": sel})
    assert parsed == [(None, 80), ("https", 443)]
    assert port_selected(parsed, "http", 80) and port_selected(parsed, "https", 443)
    assert not port_selected(parsed, "other", 443) and not port_selected(parsed, "x", 9090)
    assert exported_ports({}) is None and consumer_clusters({}) is None
    assert consumer_clusters({"isthmus.io/consumer-clusters": "c3, c1"}) == ["c1", "c3"]
    assert consumer_clusters({"isthmus.io/consumer-clusters": ""}) == []
    with pytest.raises(InvalidAnnotation, match="each entry must be a port"):
        exported_ports({"isthmus.io/exported-ports": "80,http"})


def test_resolve_and_the_printer_column() -> None:
    assert resolve([], ["c2", "c1"]) == (["c1", "c2"], [])
    assert resolve(["c1", "c9"], ["c1", "c2"]) == (["c1"], ["c9"])
    assert show_clusters(["c1", "c2"], []) == "* (c1,c2)"
    assert show_clusters(["c1"], ["c1"]) == "c1"


def collected(cluster: str, addresses: list[tuple[str, bool]], target: int = 8080) -> dict[str, Any]:
    return {"metadata": {"name": collected_slice_name("shop", "web", cluster),
                         "labels": {"multicluster.kubernetes.io/source-cluster": cluster},
                         "annotations": {SERVICE_PORTS_ANNOTATION: "http=80/TCP,dns=53/UDP"}},
            "ports": [{"name": "http", "port": target, "protocol": "TCP"}, {"name": "dns", "port": 53,
                                                                            "protocol": "UDP"}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": r}} for a, r in addresses]}


def test_backends_are_the_ready_pods_of_the_provider_clusters_only() -> None:
    found = backends([collected("c1", [("127.101.0.1", True), ("127.101.0.2", False)]),
                      collected("c2", [("127.102.0.1", True)], target=8081),
                      collected("c3", [("127.103.0.1", True)])], ["c1", "c2"])
    assert found.clusters == ["c1", "c2"]
    assert found.ports == [("dns", 53, "UDP"), ("http", 80, "TCP")]
    assert sorted((s.address, s.port) for s in found.servers["http"]) == [("127.101.0.1", 8080),
                                                                          ("127.102.0.1", 8081)]
    spec, notes = pool_spec(found)
    assert [f.bind_port for f in spec.haproxy.frontends] == [80]
    assert notes == ["port 53/UDP is not exposed: HAProxy pools balance TCP only"]
    assert [(s.address, s.port) for s in spec.haproxy.backends[0].servers] == [("127.101.0.1", 8080),
                                                                               ("127.102.0.1", 8081)]


def test_load_balancer_status_from_the_pool() -> None:
    pool = LoadBalancerPool.from_dict({"metadata": {"name": pool_name("shop", "web")}, "status": {
        "frontends": [{"name": "port-80-tcp", "port": 80, "publicAddresses": ["127.30.0.1"]},
                      {"name": "port-443-tcp", "port": 443, "publicAddresses": ["127.30.0.1"]}]}})
    status = status_of(pool)
    assert status.to_dict() == {"ingress": [{"ip": "127.30.0.1", "ipMode": "Proxy", "ports": [
        {"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]}]}
    assert pool_name("shop", "web") == "mcs--shop--web"
    assert len(pool_name("n" * 60, "s" * 60)) <= 63


def obj(types: list[str], reports: list[ClusterReport], generation: int = 1) -> MultiClusterService:
    return MultiClusterService.from_dict({"metadata": {"name": "web", "namespace": "shop", "generation": generation},
                                          "spec": {"types": types},
                                          "status": {"clusters": [r.to_dict() for r in reports]}})


def test_summary_conditions() -> None:
    ok = [ClusterReport(name="c1", provider=True, service_applied=True, observed_generation=1),
          ClusterReport(name="c3", consumer=True, imported=True, observed_generation=1)]
    conds = {c.type: c for c in summarize(obj(["CrossCluster"], ok), ["c1"], ["c3"], None, None)}
    assert [conds[t].status for t in ("ServiceApplied", "EndpointSliceDispatched", "Ready")] == ["True"] * 3
    assert "LoadBalancerReady" not in conds
    failing = [ClusterReport(name="c1", provider=True, service_applied=False, message="no Service",
                             observed_generation=1)]
    conds = {c.type: c for c in summarize(obj(["LoadBalancer"], failing), ["c1", "c2"], [], None, "quota")}
    assert conds["ServiceApplied"].status == "False" and "c1: no Service" in conds["ServiceApplied"].message
    assert conds["LoadBalancerReady"].status == "False" and conds["LoadBalancerReady"].message == "quota"
    assert conds["Ready"].status == "False"
    stale = [ClusterReport(name="c1", provider=True, service_applied=True, observed_generation=1)]
    conds = {c.type: c for c in summarize(obj(["CrossCluster"], stale, generation=2), ["c1"], ["c1"], None, None)}
    assert conds["ServiceApplied"].reason == "Waiting"  # a report of an older generation is not an answer


def test_show_rows() -> None:
    o = obj(["CrossCluster"], [ClusterReport(name="c1", provider=True, service_applied=False, message="gone")])
    rows = mcs_rows([o.to_dict()])
    assert rows[0]["clusters"] == [{"name": "c1", "role": "provider", "state": "failing", "problem": "gone"}]
    assert parse_service_ports("http=80/TCP,bad,x=1") == [("http", 80, "TCP"), ("x", 1, "TCP")]


def test_default_providers_are_the_clusters_that_have_the_service() -> None:
    """Issue 40 item 15: with providerClusters left to default, a consumer without the Service is no
    provider and no failure; the object is Ready once every live cluster has answered."""
    reports = [ClusterReport(name="c1", provider=True, service_applied=True, observed_generation=1),
               ClusterReport(name="c2", provider=True, service_applied=True, observed_generation=1),
               ClusterReport(name="c3", consumer=True, imported=True, reason="NoService", observed_generation=1)]
    mcs = MultiClusterService.from_dict({"metadata": {"name": "web", "namespace": "mc", "generation": 1},
                                         "spec": {"types": ["CrossCluster"], "range": {"clusterNames": ["c3"]}}})
    providers = resolve_providers(mcs, ["c1", "c2", "c3"], reports)
    assert (providers.clusters, providers.undecided, providers.named) == (["c1", "c2"], [], False)
    conds = {c.type: c for c in summarize(mcs, providers, ["c3"], None, None, reports=reports)}
    assert [conds[t].status for t in ("ServiceApplied", "EndpointSliceDispatched", "Ready")] == ["True"] * 3
    assert conds["ServiceApplied"].message == "the Service is exposed from c1, c2"
    # A live cluster that has not answered yet is waited for (it may have the Service), a silent one is not.
    early = resolve_providers(mcs, ["c1", "c2", "c3"], reports[:2], live={"c1", "c2", "c3"})
    assert early.undecided == ["c3"]
    conds = {c.type: c for c in summarize(mcs, early, ["c3"], None, None, reports=reports[:2])}
    assert conds["ServiceApplied"].reason == "Waiting" and "c3" in conds["ServiceApplied"].message
    assert resolve_providers(mcs, ["c1", "c2", "c3"], reports[:2], live={"c1", "c2"}).undecided == []
    # No cluster has the Service: not Ready, and the message says where it will be exposed from.
    none = [ClusterReport(name="c1", observed_generation=1, reason="NoService")]
    conds = {c.type: c for c in summarize(mcs, resolve_providers(mcs, ["c1"], none), ["c1"], None, None,
                                          reports=none)}
    assert conds["ServiceApplied"].status == "False" and "no cluster has Service mc/web" in conds["ServiceApplied"].message
    # A cluster named as a provider that lacks the Service is a failure.
    named = MultiClusterService.from_dict({"metadata": {"name": "web", "namespace": "mc", "generation": 1},
                                           "spec": {"types": ["CrossCluster"], "providerClusters": [{"name": "c3"}]}})
    missing = [ClusterReport(name="c3", provider=True, service_applied=False, observed_generation=1,
                             message="Service mc/web does not exist in cluster c3; retrying")]
    conds = {c.type: c for c in summarize(named, resolve_providers(named, ["c1", "c3"], missing), ["c1", "c3"],
                                          None, None, reports=missing)}
    assert conds["ServiceApplied"].reason == "ServiceAppliedFailed" and "c3" in conds["ServiceApplied"].message
