"""The pure answer builders (docs/dns.md "Names and answers")."""

from __future__ import annotations

from isthmus.dns.records import (
    AAAA,
    PTR,
    SRV,
    A,
    Addr,
    Endpoint,
    ImportSnap,
    LocalService,
    Port,
    Ptr,
    SliceSnap,
    Srv,
    clusterset_records,
    endpoint_hostname,
    local_records,
    service_records,
)

Z = "clusterset.local"
BASE = "web.ns.svc.clusterset.local"
HTTP = Port("http", "TCP", 80)


def cs(
    imp: ImportSnap, slices: list[SliceSnap] | None = None, local: LocalService | None = None, **kw: object
):
    return clusterset_records(imp, slices or [], local_cluster="c1", local=local, zone=Z, **kw)  # type: ignore[arg-type]


def cluster_ip_slice(cluster: str, ip: str, ready: bool = True) -> SliceSnap:
    return SliceSnap(cluster, (Endpoint((ip,), ready),), (HTTP,))


def local_svc(ip: str = "127.10.0.1", ready: bool = True, headless: bool = False) -> LocalService:
    eps = (Endpoint(("127.20.0.1",), ready, "pod-a"),)
    return LocalService("ns", "web", () if headless else (ip,), headless, (HTTP,), False, None,
                        (SliceSnap("c1", eps, (Port("http", "TCP", 8080),)),))  # fmt: skip


def test_vip_wins_without_health_filtering() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", ("243.0.0.7",), (HTTP,), ("c2",))
    rs = cs(imp, [cluster_ip_slice("c2", "127.1.0.1", ready=False)])
    assert rs.get(BASE, A) == [(Addr("243.0.0.7"),)]
    assert rs.get(BASE, AAAA) == []
    assert rs.get(f"_http._tcp.{BASE}", SRV) == [(Srv(0, 100, 80, BASE),)]
    assert rs.get("7.0.0.243.in-addr.arpa", PTR) == [(Ptr(BASE),)]


def test_no_vip_prefers_local_cluster_with_ready_endpoint() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c1", "c2"))
    rs = cs(imp, [cluster_ip_slice("c2", "127.1.0.2")], local=local_svc())
    assert rs.get(BASE, A) == [(Addr("127.10.0.1"),)]


def test_no_vip_round_robin_over_ready_clusters_when_local_not_ready() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c1", "c2", "c3", "c4"))
    slices = [
        cluster_ip_slice("c3", "127.1.0.3"),
        cluster_ip_slice("c2", "127.1.0.2"),
        cluster_ip_slice("c4", "127.1.0.4", ready=False),
    ]
    rs = cs(imp, slices, local=local_svc(ready=False))
    assert rs.get(BASE, A) == [(Addr("127.1.0.2"),), (Addr("127.1.0.3"),)]


def test_local_not_exporting_is_ignored() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c2",))
    rs = cs(imp, [cluster_ip_slice("c2", "127.1.0.2")], local=local_svc())
    assert rs.get(BASE, A) == [(Addr("127.1.0.2"),)]


def test_no_ready_cluster_is_nodata_not_nxdomain() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c2",))
    rs = cs(imp, [cluster_ip_slice("c2", "127.1.0.2", ready=False)])
    assert rs.get(BASE, A) == []
    assert rs.get(f"_http._tcp.{BASE}", SRV) == []  # no address, no SRV
    assert BASE in rs.names and "ns.svc.clusterset.local" in rs.names and "svc.clusterset.local" in rs.names
    assert Z not in rs.names  # the apex belongs to the zone, not to a service


def test_headless_every_ready_endpoint_and_hostnames() -> None:
    imp = ImportSnap("ns", "web", "Headless", (), (HTTP, Port(None, "UDP", 53)), ("c1", "c2"))
    remote = SliceSnap(
        "c2",
        (
            Endpoint(("127.2.0.1",), True, "db-0"),
            Endpoint(("127.2.0.2",), True),
            Endpoint(("127.2.0.3",), False),
        ),
        (Port("http", "TCP", 9090),),
    )
    rs = cs(imp, [remote], local=local_svc(headless=True))
    assert rs.get(BASE, A) == [(Addr("127.2.0.1"), Addr("127.2.0.2"), Addr("127.20.0.1"))]
    assert rs.get(f"db-0.c2.{BASE}", A) == [(Addr("127.2.0.1"),)]
    assert rs.get(f"127-2-0-2.c2.{BASE}", A) == [(Addr("127.2.0.2"),)]
    assert rs.get(f"pod-a.c1.{BASE}", A) == [(Addr("127.20.0.1"),)]
    assert rs.get(f"127-2-0-3.c2.{BASE}", A) == []  # not ready
    srv = rs.get(f"_http._tcp.{BASE}", SRV)[0]
    assert srv == (
        Srv(0, 33, 8080, f"pod-a.c1.{BASE}"),
        Srv(0, 33, 9090, f"127-2-0-2.c2.{BASE}"),
        Srv(0, 33, 9090, f"db-0.c2.{BASE}"),
    )
    assert rs.get(BASE, SRV) == [srv]  # only the named port
    assert f"c2.{BASE}" in rs.names  # empty non-terminal
    assert (f"c2.{BASE}", A) not in rs.rrsets  # ...without --cluster-names


def test_srv_identical_records_once() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", ("243.0.0.1",), (HTTP, Port("web", "TCP", 80)), ())
    rs = cs(imp)
    assert rs.get(BASE, SRV) == [(Srv(0, 100, 80, BASE),)]
    assert rs.get(f"_web._tcp.{BASE}", SRV) == [(Srv(0, 100, 80, BASE),)]


def test_cluster_names_flag() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", ("243.0.0.1",), (HTTP,), ("c1", "c2"))
    slices = [cluster_ip_slice("c2", "127.1.0.2")]
    assert (f"c2.{BASE}", A) not in cs(imp, slices, local=local_svc()).rrsets
    rs = cs(imp, slices, local=local_svc(), cluster_names=True)
    assert rs.get(f"c2.{BASE}", A) == [(Addr("127.1.0.2"),)]
    assert rs.get(f"c1.{BASE}", A) == [(Addr("127.10.0.1"),)]


def test_ipv6_addresses_go_to_aaaa() -> None:
    imp = ImportSnap("ns", "web", "Headless", (), (), ())
    rs = cs(imp, [SliceSnap("c2", (Endpoint(("fd00::1",)), Endpoint(("not-an-ip",))))])
    assert rs.get(BASE, AAAA) == [(Addr("fd00::1"),)]
    assert rs.get(BASE, A) == []
    assert rs.get(f"fd00--1.c2.{BASE}", AAAA) == [(Addr("fd00::1"),)]


def test_endpoint_hostname() -> None:
    assert endpoint_hostname(Endpoint(("10.0.0.1",), True, "Web-0")) == "web-0"
    assert endpoint_hostname(Endpoint(("fd00::a",))) == "fd00--a"


def test_local_zone_records() -> None:
    svc = local_svc()
    rs = local_records(svc, zone="cluster.local")
    base = "web.ns.svc.cluster.local"
    assert rs.get(base, A) == [(Addr("127.10.0.1"),)]
    assert rs.get(f"_http._tcp.{base}", SRV) == [(Srv(0, 100, 80, base),)]
    headless = local_records(local_svc(headless=True), zone="cluster.local")
    assert headless.get(base, A) == [(Addr("127.20.0.1"),)]
    assert headless.get(f"pod-a.{base}", A) == [(Addr("127.20.0.1"),)]
    assert headless.get(f"_http._tcp.{base}", SRV) == [(Srv(0, 100, 8080, f"pod-a.{base}"),)]
    ext = LocalService("ns", "web", external_name="example.org.")
    assert local_records(ext, zone="cluster.local").cnames == {base: "example.org"}


def test_publish_not_ready_addresses_local() -> None:
    svc = LocalService(
        "ns", "web", (), True, (), True, None, (SliceSnap("c1", (Endpoint(("127.3.0.1",), False),)),)
    )
    assert local_records(svc, zone="cluster.local").get("web.ns.svc.cluster.local", A) == [
        (Addr("127.3.0.1"),)
    ]


def test_service_records_spans_zones_and_local_zone() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", ("243.0.0.1",), (HTTP,), ("c1",))
    rs = service_records(
        imp,
        [],
        local_svc(),
        local_cluster="c1",
        zones=["clusterset.local", "mesh.example"],
        local_zone="cluster.local",
    )
    assert rs.get(BASE, A) == rs.get("web.ns.svc.mesh.example", A) == [(Addr("243.0.0.1"),)]
    assert rs.get("web.ns.svc.cluster.local", A) == [(Addr("127.10.0.1"),)]
    assert rs.get("1.0.0.243.in-addr.arpa", PTR) == [(Ptr(BASE),)]  # first zone only
    assert service_records(None, [], local_svc(), local_cluster="c1", zones=[Z], local_zone=None).rrsets == {}


def test_locality_steers_answers_with_fallback() -> None:
    slices = [cluster_ip_slice("c2", "127.1.0.2")]
    local = local_svc()
    no_vip = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c1", "c2"))
    assert cs(no_vip, slices, local=local).get(BASE, A) == [(Addr("127.10.0.1"),)]  # Lighthouse's default
    remote = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c1", "c2"), locality="remote")
    assert cs(remote, slices, local=local).get(BASE, A) == [(Addr("127.1.0.2"),)]
    assert cs(remote, [cluster_ip_slice("c2", "127.1.0.2", ready=False)], local=local).get(BASE, A) == \
        [(Addr("127.10.0.1"),)]  # nothing ready remotely: the local cluster
    headless = SliceSnap("c2", (Endpoint(("127.2.0.1",), True),), (HTTP,))
    for locality, want in (("", ["127.2.0.1", "127.20.0.1"]), ("local", ["127.20.0.1"]), ("remote", ["127.2.0.1"])):
        imp = ImportSnap("ns", "web", "Headless", (), (HTTP,), ("c1", "c2"), locality=locality)
        got = cs(imp, [headless], local=local_svc(headless=True)).get(BASE, A)
        assert [a.ip for a in got[0]] == want, locality
    imp = ImportSnap("ns", "web", "Headless", (), (HTTP,), ("c1", "c2"), locality="local")
    got = cs(imp, [headless], local=local_svc(headless=True, ready=False)).get(BASE, A)
    assert [a.ip for a in got[0]] == ["127.2.0.1"]  # no usable local endpoint: the others


def test_locality_narrows_headless_names_and_srv_but_keeps_every_pods_host_name() -> None:
    """`local` lists only this cluster's pods under the service name and its SRV records; a pod of
    another cluster still resolves by its own name (a StatefulSet peer asks for it on purpose)."""
    remote = SliceSnap("c2", (Endpoint(("127.2.0.1",), True, "db-1"),), (Port("http", "TCP", 8080),))
    imp = ImportSnap("ns", "web", "Headless", (), (HTTP,), ("c1", "c2"), locality="local")
    rs = cs(imp, [remote], local=local_svc(headless=True))
    assert rs.get(BASE, A) == [(Addr("127.20.0.1"),)]
    assert rs.get(f"_http._tcp.{BASE}", SRV) == [(Srv(0, 100, 8080, f"pod-a.c1.{BASE}"),)]
    assert rs.get(BASE, SRV) == [(Srv(0, 100, 8080, f"pod-a.c1.{BASE}"),)]
    assert rs.get(f"db-1.c2.{BASE}", A) == [(Addr("127.2.0.1"),)]
    # remote: the other cluster's pods, and the SRV records follow
    rs = cs(ImportSnap("ns", "web", "Headless", (), (HTTP,), ("c1", "c2"), locality="remote"),
            [remote], local=local_svc(headless=True))
    assert rs.get(BASE, A) == [(Addr("127.2.0.1"),)]
    assert rs.get(f"_http._tcp.{BASE}", SRV) == [(Srv(0, 100, 8080, f"db-1.c2.{BASE}"),)]
    assert rs.get(f"pod-a.c1.{BASE}", A) == [(Addr("127.20.0.1"),)]


def test_remote_locality_falls_back_to_this_clusters_pods() -> None:
    unready = SliceSnap("c2", (Endpoint(("127.2.0.1",), False),), (HTTP,))
    imp = ImportSnap("ns", "web", "Headless", (), (HTTP,), ("c1", "c2"), locality="remote")
    assert cs(imp, [unready], local=local_svc(headless=True)).get(BASE, A) == [(Addr("127.20.0.1"),)]


def test_local_locality_without_a_ready_local_cluster_ip_answers_the_others() -> None:
    imp = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c1", "c2", "c3"), locality="local")
    slices = [cluster_ip_slice("c2", "127.1.0.2"), cluster_ip_slice("c3", "127.1.0.3")]
    assert cs(imp, slices, local=local_svc()).get(BASE, A) == [(Addr("127.10.0.1"),)]
    rs = cs(imp, slices, local=local_svc(ready=False))
    assert rs.get(BASE, A) == [(Addr("127.1.0.2"),), (Addr("127.1.0.3"),)]  # round-robin over the others
    # remote with several ready clusters: round-robin over them, never this cluster's
    imp = ImportSnap("ns", "web", "ClusterSetIP", (), (HTTP,), ("c1", "c2", "c3"), locality="remote")
    assert cs(imp, slices, local=local_svc()).get(BASE, A) == [(Addr("127.1.0.2"),), (Addr("127.1.0.3"),)]


def test_locality_leaves_a_vip_answer_alone() -> None:
    for locality in ("local", "remote"):
        imp = ImportSnap("ns", "web", "ClusterSetIP", ("243.0.0.7",), (HTTP,), ("c1", "c2"), locality=locality)
        assert cs(imp, [cluster_ip_slice("c2", "127.1.0.2")], local=local_svc()).get(BASE, A) == \
            [(Addr("243.0.0.7"),)]


def _import_from_api(type_: str, annotations: dict[str, str] | None = None, **spec: object) -> ImportSnap:
    """The ServiceImport as the DNS server reads it (dns.source.import_snapshot)."""
    from isthmus.api.mcs import ServiceImport
    from isthmus.dns.source import import_snapshot
    from isthmus.kube.resources import resource_for

    ips = ["243.0.0.7"] if type_ == "ClusterSetIP" else []
    return import_snapshot(resource_for(ServiceImport).from_dict({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": "ns", "annotations": annotations},
        "spec": {"type": type_, "ips": ips, "ports": [{"name": "http", "port": 80}], **spec},
        "status": {"clusters": [{"cluster": "c1"}, {"cluster": "c2"}]}}))


def test_prefer_close_lists_this_clusters_headless_pods_first_and_falls_back() -> None:
    """trafficDistribution PreferClose answers a headless name as `local` does: this cluster's
    ready pods only, the others' when it has none; the annotation overrides it."""
    other = SliceSnap("c2", (Endpoint(("127.2.0.1",), True, "db-1"),), (Port("http", "TCP", 8080),))
    imp = _import_from_api("Headless", trafficDistribution="PreferClose")
    rs = cs(imp, [other], local=local_svc(headless=True))
    assert rs.get(BASE, A) == [(Addr("127.20.0.1"),)]
    assert rs.get(f"_http._tcp.{BASE}", SRV) == [(Srv(0, 100, 8080, f"pod-a.c1.{BASE}"),)]
    assert rs.get(f"db-1.c2.{BASE}", A) == [(Addr("127.2.0.1"),)]  # a peer by its own name: never hidden
    rs = cs(imp, [other], local=local_svc(headless=True, ready=False))
    assert rs.get(BASE, A) == [(Addr("127.2.0.1"),)]  # no ready pod here: the others'
    for annotation, want in (("none", ["127.2.0.1", "127.20.0.1"]), ("remote", ["127.2.0.1"])):
        imp = _import_from_api("Headless", {"isthmus.io/affinity": annotation}, trafficDistribution="PreferClose")
        assert [a.ip for a in cs(imp, [other], local=local_svc(headless=True)).get(BASE, A)[0]] == want


def test_prefer_close_leaves_a_vip_answer_alone() -> None:
    """A ClusterSetIP import answers its VIP either way: the preference is applied behind it, by the proxy."""
    imp = _import_from_api("ClusterSetIP", trafficDistribution="PreferClose")
    assert imp.locality == "local"
    assert cs(imp, [cluster_ip_slice("c2", "127.1.0.2")], local=local_svc()).get(BASE, A) == [(Addr("243.0.0.7"),)]
