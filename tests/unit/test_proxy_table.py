"""The proxy table: listeners and endpoint sets from snapshots (isthmus.proxy.table), and the
API-object → snapshot converters."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import ServiceImport
from isthmus.kube.resources import resource_for
from isthmus.proxy import (
    Backend,
    EndpointSnap,
    ImportSnap,
    ListenerKey,
    Port,
    ServiceSnap,
    SliceSnap,
    build_table,
    import_snapshot,
    service_snapshot,
    slice_snapshot,
)

HTTP = Port("http", "TCP", 80)
DNS = Port("dns", "UDP", 53)


def eps(*ips: str, ready: bool = True, **kw: Any) -> tuple[EndpointSnap, ...]:
    return tuple(EndpointSnap((ip,), ready, **kw) for ip in ips)


def kube_slice(*ips: str, ports: tuple[Port, ...] = (Port("http", "TCP", 8080),), **kw: Any) -> SliceSnap:
    return SliceSnap(eps(*ips, **kw), ports)


def svc(
    name: str = "web", ip: str = "127.201.0.10", ports: tuple[Port, ...] = (HTTP,), **kw: Any
) -> ServiceSnap:
    return ServiceSnap("shop", name, cluster_ips=(ip,) if ip else (), ports=ports, **kw)


def table(services: Any = (), slices: Any = None, imports: Any = (), islices: Any = None, **kw: Any) -> Any:
    kw.setdefault("cluster_id", "c1")
    return build_table(services, slices or {}, imports, islices or {}, **kw)


# --- services ---------------------------------------------------------------------------------------


def test_cluster_ip_listener_with_ready_endpoints() -> None:
    t = table(
        [svc()],
        {"shop/web": [kube_slice("127.1.0.2", "127.1.0.1"), kube_slice("127.1.0.3", ready=False)]},
    )
    target = t.listeners[ListenerKey("TCP", "127.201.0.10", 80)]
    assert target.backends == (Backend("127.1.0.1", 8080), Backend("127.1.0.2", 8080))
    assert (target.service, target.port_name, target.kind, target.reuse_port) == (
        "shop/web",
        "http",
        "ClusterIP",
        False,
    )
    assert t.conflicts == []


def test_headless_and_ipless_services_get_no_listener() -> None:
    assert table([svc(ip="")], {"shop/web": [kube_slice("127.1.0.1")]}).listeners == {}


def test_service_without_endpoints_still_listens() -> None:
    t = table([svc()])
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == ()


def test_ports_map_by_name_and_protocol() -> None:
    s = svc(ports=(HTTP, Port("metrics", "TCP", 9090), DNS))
    slice_ports = (Port("metrics", "TCP", 9100), Port("http", "TCP", 8080), Port("dns", "UDP", 5353))
    t = table([s], {"shop/web": [kube_slice("127.1.0.1", ports=slice_ports)]})
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == (Backend("127.1.0.1", 8080),)
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 9090)].backends == (Backend("127.1.0.1", 9100),)
    assert t.listeners[ListenerKey("UDP", "127.201.0.10", 53)].backends == (Backend("127.1.0.1", 5353),)


def test_single_unnamed_port_falls_back_to_the_slices_only_port() -> None:
    s = svc(ports=(Port("", "TCP", 80),))
    t = table([s], {"shop/web": [kube_slice("127.1.0.1", ports=(Port("web", "TCP", 8080),))]})
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == (Backend("127.1.0.1", 8080),)


def test_multi_port_service_does_not_guess_unmatched_names() -> None:
    s = svc(ports=(HTTP, Port("admin", "TCP", 81)))
    t = table([s], {"shop/web": [kube_slice("127.1.0.1", ports=(Port("http", "TCP", 8080),))]})
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 81)].backends == ()


def test_sctp_is_skipped() -> None:
    t = table([svc(ports=(Port("s", "SCTP", 80),))])
    assert t.listeners == {}


def test_nodeport_listens_on_node_address() -> None:
    s = svc(type="NodePort", ports=(Port("http", "TCP", 80, 30080),))
    t = table([s], {"shop/web": [kube_slice("127.1.0.1")]})
    node = t.listeners[ListenerKey("TCP", "127.0.0.1", 30080)]
    assert node.kind == "NodePort" and node.backends == (Backend("127.1.0.1", 8080),)
    assert ListenerKey("TCP", "127.201.0.10", 80) in t.listeners
    assert ListenerKey("TCP", "127.0.0.1", 30080) not in table([s], node_address=None).listeners


def test_clusterip_service_ignores_node_ports() -> None:
    s = svc(ports=(Port("http", "TCP", 80, 30080),))
    assert len(table([s]).listeners) == 1


def test_terminating_serving_endpoints_are_used_only_when_none_is_ready() -> None:
    draining = SliceSnap(
        (EndpointSnap(("127.1.0.9",), ready=False, serving=True, terminating=True),),
        (Port("http", "TCP", 8080),),
    )
    t = table([svc()], {"shop/web": [draining]})
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == (Backend("127.1.0.9", 8080),)
    t = table([svc()], {"shop/web": [draining, kube_slice("127.1.0.1")]})
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == (Backend("127.1.0.1", 8080),)


def test_not_ready_not_terminating_endpoints_are_never_used() -> None:
    s = SliceSnap((EndpointSnap(("127.1.0.9",), ready=False, serving=True),), (Port("http", "TCP", 8080),))
    assert table([svc()], {"shop/web": [s]}).listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == ()


def test_duplicate_endpoints_across_slices_are_merged() -> None:
    t = table([svc()], {"shop/web": [kube_slice("127.1.0.1"), kube_slice("127.1.0.1")]})
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == (Backend("127.1.0.1", 8080),)


def test_fqdn_slices_are_ignored() -> None:
    s = SliceSnap(eps("db.example"), (Port("http", "TCP", 8080),), address_type="FQDN")
    assert table([svc()], {"shop/web": [s]}).listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == ()


def test_affinity_is_carried() -> None:
    t = table([svc(affinity_timeout=60)])
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].affinity_timeout == 60


def test_dual_stack_listens_on_every_cluster_ip() -> None:
    s = ServiceSnap("shop", "web", cluster_ips=("127.201.0.10", "::1"), ports=(HTTP,))
    keys = set(table([s]).listeners)
    assert keys == {ListenerKey("TCP", "127.201.0.10", 80), ListenerKey("TCP", "::1", 80)}


# --- imports (VIPs) ---------------------------------------------------------------------------------


def imp(clusters: tuple[str, ...] = ("c1", "c2"), **kw: Any) -> ImportSnap:
    kw.setdefault("ips", ("127.250.0.5",))
    kw.setdefault("ports", (HTTP,))
    return ImportSnap("shop", "web", clusters=clusters, **kw)


def imported(cluster: str, *ips: str) -> SliceSnap:
    return SliceSnap(eps(*ips), (Port("http", "TCP", 8080),), cluster)


def test_vip_balances_over_every_cluster_including_local() -> None:
    t = table(
        [svc()],
        {"shop/web": [kube_slice("127.1.0.1")]},
        [imp()],
        {"shop/web": [imported("c2", "127.2.0.1"), imported("c3", "127.3.0.1")]},
    )
    vip = t.listeners[ListenerKey("TCP", "127.250.0.5", 80)]
    assert vip.kind == "ClusterSetIP" and vip.reuse_port
    assert vip.backends == (
        Backend("127.1.0.1", 8080),
        Backend("127.2.0.1", 8080),
        Backend("127.3.0.1", 8080),
    )
    assert t.listeners[ListenerKey("TCP", "127.201.0.10", 80)].backends == (Backend("127.1.0.1", 8080),)


def test_vip_leaves_out_local_endpoints_when_not_an_exporter() -> None:
    t = table(
        [svc()],
        {"shop/web": [kube_slice("127.1.0.1")]},
        [imp(clusters=("c2",))],
        {"shop/web": [imported("c2", "127.2.0.1")]},
    )
    assert t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends == (Backend("127.2.0.1", 8080),)


def test_vip_without_local_service() -> None:
    t = table([], {}, [imp(clusters=("c2",))], {"shop/web": [imported("c2", "127.2.0.1")]})
    assert set(t.listeners) == {ListenerKey("TCP", "127.250.0.5", 80)}


def test_vip_ignores_an_imported_slice_claiming_the_local_cluster() -> None:
    t = table(
        [svc()],
        {"shop/web": [kube_slice("127.1.0.1")]},
        [imp()],
        {"shop/web": [imported("c1", "127.9.9.9"), imported("c2", "127.2.0.1")]},
    )
    assert Backend("127.9.9.9", 8080) not in t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends


def test_vip_never_uses_an_mcs_slice_of_the_local_cluster() -> None:
    """The agent may publish an MCS slice for this cluster's own export: its kube slices count, once."""
    own_mcs = imported("c1", "127.1.0.1", "127.9.9.9")  # a copy of the kube slice, plus a stale address
    for clusters in (("c1", "c2"), ("c2",)):  # an exporter, or not (yet / any more)
        t = table(
            [svc()],
            {"shop/web": [kube_slice("127.1.0.1")]},
            [imp(clusters=clusters)],
            {"shop/web": [own_mcs, imported("c2", "127.2.0.1")]},
        )
        local = (Backend("127.1.0.1", 8080),) if "c1" in clusters else ()
        assert t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends == (
            *local,
            Backend("127.2.0.1", 8080),
        ), clusters


def test_import_without_vip_or_headless_gets_no_listener() -> None:
    assert table([], {}, [imp(ips=())]).listeners == {}
    assert table([], {}, [imp(type="Headless")]).listeners == {}


def test_vip_port_this_cluster_does_not_serve_as_the_import_goes_to_the_others() -> None:
    """Conformance case 26: this cluster's Service has tcp on another number than the import, so the
    agent's MCS slice for it lists no tcp port: its own kube slices serve no tcp traffic to the VIP."""
    tcp = Port("tcp", "TCP", 42)
    local_slices = {"shop/web": [kube_slice("127.1.0.1", ports=(Port("tcp", "TCP", 42),))]}
    c2 = SliceSnap(eps("127.2.0.1"), (Port("tcp", "TCP", 42),), "c2")
    narrowed = SliceSnap(eps("127.1.0.1"), (), "c1")
    t = table([svc()], local_slices, [imp(ports=(tcp,))], {"shop/web": [narrowed, c2]})
    assert t.listeners[ListenerKey("TCP", "127.250.0.5", 42)].backends == (Backend("127.2.0.1", 42),)
    served = SliceSnap(eps("127.1.0.1"), (Port("tcp", "TCP", 42),), "c1")
    t = table([svc()], local_slices, [imp(ports=(tcp,))], {"shop/web": [served, c2]})
    assert t.listeners[ListenerKey("TCP", "127.250.0.5", 42)].backends == (
        Backend("127.1.0.1", 42), Backend("127.2.0.1", 42))


def test_vip_ports_map_by_name() -> None:
    i = imp(ports=(Port("http", "TCP", 80), DNS))
    s = SliceSnap(eps("127.2.0.1"), (Port("dns", "UDP", 5353), Port("http", "TCP", 8080)), "c2")
    t = table([], {}, [i], {"shop/web": [s]})
    assert t.listeners[ListenerKey("UDP", "127.250.0.5", 53)].backends == (Backend("127.2.0.1", 5353),)
    assert t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends == (Backend("127.2.0.1", 8080),)


def test_vip_affinity() -> None:
    t = table([], {}, [imp(affinity_timeout=30)])
    assert t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].affinity_timeout == 30


# --- conflicts --------------------------------------------------------------------------------------


def test_listener_claimed_twice_goes_to_one_owner_deterministically() -> None:
    a = svc("a", type="NodePort", ports=(Port("http", "TCP", 80, 30080),))
    b = svc("b", ip="127.201.0.11", type="NodePort", ports=(Port("http", "TCP", 80, 30080),))
    t1 = table([a, b])
    t2 = table([b, a])
    key = ListenerKey("TCP", "127.0.0.1", 30080)
    assert t1.listeners[key].service == t2.listeners[key].service == "shop/a"
    assert len(t1.conflicts) == 1 and "shop/b" in t1.conflicts[0]


def named_imp(name: str, ports: tuple[Port, ...] = (HTTP,), created: float = 0.0) -> ImportSnap:
    return ImportSnap("shop", name, ips=("127.250.0.5",), ports=ports, clusters=("c2",), created=created)


BACKEND_OF = {"zeta": "127.2.0.1", "alpha": "127.2.0.2", "aaa": "127.2.0.3"}


def vip_table(imps: list[ImportSnap], held: Any = None) -> Any:
    """Imports all on one VIP, each with its own backend (BACKEND_OF)."""
    slices = {i.key: [imported("c2", BACKEND_OF[i.name])] for i in imps}
    return table([], {}, imps, slices, held=held)


def test_contested_vip_stays_with_the_service_holding_it_on_every_port() -> None:
    """A freed VIP reallocated while the old import lingers: the holder keeps the whole address."""
    zeta = named_imp("zeta")
    before = vip_table([zeta])
    # the newcomer sorts first by name and also wants a second port on the same VIP
    alpha = named_imp("alpha", ports=(HTTP, Port("metrics", "TCP", 9090)))
    t = vip_table([zeta, alpha], held=before.listeners)
    assert set(t.listeners) == {ListenerKey("TCP", "127.250.0.5", 80)}, "no port of the VIP serves alpha"
    target = t.listeners[ListenerKey("TCP", "127.250.0.5", 80)]
    assert target.service == "shop/zeta" and target.backends == (Backend("127.2.0.1", 8080),)
    assert t.conflicts == [
        "127.250.0.5 is claimed by ClusterSetIP shop/zeta and by ClusterSetIP shop/alpha; "
        "serving only the first, on every port"
    ]
    # rebuilt again and again: no flip, the same single conflict
    again = vip_table([alpha, zeta], held=t.listeners)
    assert again.listeners == t.listeners and again.conflicts == t.conflicts


def test_contested_vip_goes_to_the_newcomer_once_the_holder_lets_go() -> None:
    zeta, alpha = named_imp("zeta"), named_imp("alpha", ports=(HTTP, Port("metrics", "TCP", 9090)))
    held = vip_table([zeta, alpha], held=vip_table([zeta]).listeners).listeners
    t = vip_table([alpha], held=held)
    assert {k.port for k in t.listeners} == {80, 9090}
    assert {x.service for x in t.listeners.values()} == {"shop/alpha"} and t.conflicts == []


def test_contested_vip_with_no_holder_goes_to_the_older_object() -> None:
    """A proxy (re)starting amid a conflict keeps serving the import that existed first."""
    old, new = named_imp("zeta", created=1000.0), named_imp("alpha", created=2000.0)
    for order in ([old, new], [new, old]):
        assert vip_table(order).listeners[ListenerKey("TCP", "127.250.0.5", 80)].service == "shop/zeta"
    # unknown creation times rank last, then names decide
    unknown = named_imp("aaa")
    assert vip_table([unknown, new]).listeners[ListenerKey("TCP", "127.250.0.5", 80)].service == "shop/alpha"


def test_a_service_port_holding_a_node_port_keeps_it() -> None:
    a = svc("a", type="NodePort", ports=(Port("http", "TCP", 80, 30080),))
    b = svc("b", ip="127.201.0.11", type="NodePort", ports=(Port("http", "TCP", 80, 30080),))
    key = ListenerKey("TCP", "127.0.0.1", 30080)
    held = table([b]).listeners
    t = table([a, b], held=held)
    assert t.listeners[key].service == "shop/b"
    assert len(t.conflicts) == 1 and t.conflicts[0].startswith(f"{key} is claimed by NodePort shop/b:http")


# --- converters -------------------------------------------------------------------------------------


def test_service_snapshot() -> None:
    s = Service.from_dict(
        {
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "type": "NodePort",
                "clusterIP": "127.201.0.10",
                "clusterIPs": ["127.201.0.10"],
                "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"port": 53, "protocol": "UDP"}],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
            },
        }
    )
    snap = service_snapshot(s)
    assert snap.cluster_ips == ("127.201.0.10",)
    assert snap.ports == (Port("http", "TCP", 80, 30080), Port("", "UDP", 53))
    assert snap.affinity_timeout == 60 and snap.type == "NodePort"
    assert snap.created == 0.0  # no creationTimestamp: unknown


def test_service_snapshot_defaults_and_headless() -> None:
    s = Service.from_dict(
        {
            "metadata": {"name": "w", "namespace": "s"},
            "spec": {"clusterIP": "None", "sessionAffinity": "ClientIP"},
        }
    )
    snap = service_snapshot(s)
    assert snap.cluster_ips == () and snap.affinity_timeout == 10800
    ext = Service.from_dict(
        {"metadata": {"name": "w", "namespace": "s"}, "spec": {"type": "ExternalName", "externalName": "x.y"}}
    )
    assert service_snapshot(ext).cluster_ips == ()


def test_slice_snapshot_conditions() -> None:
    s = EndpointSlice.from_dict(
        {
            "metadata": {"name": "x", "namespace": "s"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["127.1.0.1"]},
                {"addresses": ["127.1.0.2"], "conditions": {"ready": False}},
                {
                    "addresses": ["127.1.0.3"],
                    "conditions": {"ready": False, "serving": True, "terminating": True},
                },
            ],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }
    )
    snap = slice_snapshot(s, "c2")
    assert [e.ready for e in snap.endpoints] == [True, False, False]
    assert snap.endpoints[2].terminating and snap.cluster == "c2"
    assert snap.ports == (Port("http", "TCP", 8080),)


def test_import_snapshot() -> None:
    si = resource_for(ServiceImport).from_dict(
        {
            "apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": "2026-01-01T00:00:10Z"},
            "spec": {
                "type": "ClusterSetIP",
                "ips": ["127.250.0.5"],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                "sessionAffinity": "ClientIP",
            },
            "status": {"clusters": [{"cluster": "c1"}, {"cluster": "c2"}]},
        }
    )
    snap = import_snapshot(si)
    assert snap.ips == ("127.250.0.5",) and snap.clusters == ("c1", "c2")
    assert snap.ports == (HTTP,) and snap.affinity_timeout == 10800
    assert snap.created == datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC).timestamp()


def _vip_backends(locality: str, local_ready: bool = True, remote_ready: bool = True) -> set[str]:
    t = table(
        [svc()],
        {"shop/web": [kube_slice("127.1.0.1", ready=local_ready)]},
        [imp(clusters=("c1", "c2"), locality=locality)],
        {"shop/web": [SliceSnap(eps("127.2.0.1", ready=remote_ready), (Port("http", "TCP", 8080),), "c2")]},
    )
    return {b.host for b in t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends}


def test_locality_prefers_one_side_and_falls_back_to_every_cluster() -> None:
    assert _vip_backends("") == {"127.1.0.1", "127.2.0.1"}
    assert _vip_backends("local") == {"127.1.0.1"}
    assert _vip_backends("remote") == {"127.2.0.1"}
    assert _vip_backends("local", local_ready=False) == {"127.2.0.1"}  # no ready local endpoint
    assert _vip_backends("remote", remote_ready=False) == {"127.1.0.1"}


def test_locality_comes_from_the_affinity_annotation() -> None:
    def snap(value: str) -> ImportSnap:
        return import_snapshot(resource_for(ServiceImport).from_dict({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "shop", "annotations": {"isthmus.io/affinity": value}},
            "spec": {"type": "ClusterSetIP", "ips": ["127.250.0.5"], "ports": [{"name": "http", "port": 80}]}}))

    assert snap("Remote").locality == "remote"
    assert snap("nearby").locality == ""  # unknown: no preference


def test_locality_none_and_unknown_values_balance_over_every_cluster() -> None:
    def snap(value: str) -> ImportSnap:
        return import_snapshot(resource_for(ServiceImport).from_dict({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "shop", "annotations": {"isthmus.io/affinity": value}},
            "spec": {"type": "ClusterSetIP", "ips": ["127.250.0.5"], "ports": [{"name": "http", "port": 80}]},
            "status": {"clusters": [{"cluster": "c1"}, {"cluster": "c2"}]}}))

    for value in ("none", "None", "nearby", ""):
        imp_snap = snap(value)
        assert imp_snap.locality == "", value
        t = table([svc()], {"shop/web": [kube_slice("127.1.0.1")]}, [imp_snap],
                  {"shop/web": [SliceSnap(eps("127.2.0.1"), (Port("http", "TCP", 8080),), "c2")]})
        assert {b.host for b in t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends} == \
            {"127.1.0.1", "127.2.0.1"}, value


def test_locality_counts_this_cluster_only_while_it_exports() -> None:
    """`local` on a cluster that is not (or no longer) an exporter: it has no endpoints of its own
    behind the VIP, so the others serve."""
    t = table([svc()], {"shop/web": [kube_slice("127.1.0.1")]}, [imp(clusters=("c2",), locality="local")],
              {"shop/web": [SliceSnap(eps("127.2.0.1"), (Port("http", "TCP", 8080),), "c2")]})
    assert {b.host for b in t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends} == {"127.2.0.1"}


def test_locality_prefers_ready_over_draining_on_the_other_side() -> None:
    """A preferred side with only terminating-but-serving pods is not ready: the other side's ready
    pods take the connections (draining ones serve only when nobody is ready anywhere)."""
    draining = kube_slice("127.1.0.1", ready=False, serving=True, terminating=True)
    remote_ok = SliceSnap(eps("127.2.0.1"), (Port("http", "TCP", 8080),), "c2")
    t = table([svc()], {"shop/web": [draining]}, [imp(clusters=("c1", "c2"), locality="local")],
              {"shop/web": [remote_ok]})
    assert {b.host for b in t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends} == {"127.2.0.1"}
    remote_draining = SliceSnap(eps("127.2.0.1", ready=False, serving=True, terminating=True),
                                (Port("http", "TCP", 8080),), "c2")
    t = table([svc()], {"shop/web": [draining]}, [imp(clusters=("c1", "c2"), locality="local")],
              {"shop/web": [remote_draining]})
    assert {b.host for b in t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends} == \
        {"127.1.0.1", "127.2.0.1"}


def test_unknown_affinity_is_what_gets_logged() -> None:
    from isthmus.dns.source import unknown_affinity as dns_unknown
    from isthmus.proxy.proxy import unknown_affinity as proxy_unknown

    def obj(annotations: dict[str, str] | None) -> Any:
        return resource_for(ServiceImport).from_dict({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "shop", "annotations": annotations}, "spec": {}})

    for unknown in (proxy_unknown, dns_unknown):
        assert unknown(obj({"isthmus.io/affinity": "nearby"})) == "nearby"
        for fine in ({"isthmus.io/affinity": "None"}, {"isthmus.io/affinity": " Local "},
                     {"isthmus.io/affinity": ""}, {}, None):
            assert unknown(obj(fine)) is None, fine
        assert unknown(None) is None


def _si(annotations: dict[str, str] | None = None, **spec: Any) -> Any:
    return resource_for(ServiceImport).from_dict({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": "shop", "annotations": annotations},
        "spec": {"type": "ClusterSetIP", "ips": ["127.250.0.5"], "ports": [{"name": "http", "port": 80}], **spec},
        "status": {"clusters": [{"cluster": "c1"}, {"cluster": "c2"}]}})


def _vip_hosts(imp_snap: ImportSnap, local_ready: bool = True) -> set[str]:
    t = table([svc()], {"shop/web": [kube_slice("127.1.0.1", ready=local_ready)]}, [imp_snap],
              {"shop/web": [SliceSnap(eps("127.2.0.1"), (Port("http", "TCP", 8080),), "c2")]})
    return {b.host for b in t.listeners[ListenerKey("TCP", "127.250.0.5", 80)].backends}


def test_prefer_close_sends_the_vip_to_this_clusters_endpoints_and_falls_back() -> None:
    """trafficDistribution PreferClose (and its kube siblings) on the import: this cluster's pods
    only while one is ready, every cluster's when none is; an unknown value balances over all."""
    for value in ("PreferClose", "PreferSameZone", "PreferSameNode"):
        assert _vip_hosts(import_snapshot(_si(trafficDistribution=value))) == {"127.1.0.1"}, value
        assert _vip_hosts(import_snapshot(_si(trafficDistribution=value)), local_ready=False) == {"127.2.0.1"}
    assert _vip_hosts(import_snapshot(_si())) == {"127.1.0.1", "127.2.0.1"}
    assert _vip_hosts(import_snapshot(_si(trafficDistribution="PreferSameRegion"))) == {"127.1.0.1", "127.2.0.1"}


def test_the_affinity_annotation_overrides_prefer_close() -> None:
    assert _vip_hosts(import_snapshot(_si({"isthmus.io/affinity": "remote"}, trafficDistribution="PreferClose"))) \
        == {"127.2.0.1"}
    assert _vip_hosts(import_snapshot(_si({"isthmus.io/affinity": "none"}, trafficDistribution="PreferClose"))) \
        == {"127.1.0.1", "127.2.0.1"}
    # an unknown annotation is ignored: PreferClose still decides
    assert _vip_hosts(import_snapshot(_si({"isthmus.io/affinity": "nearby"}, trafficDistribution="PreferClose"))) \
        == {"127.1.0.1"}


def test_unknown_distribution_is_what_gets_logged() -> None:
    from isthmus.api.mcs import unknown_import_distribution

    for unknown in (unknown_import_distribution,):
        assert unknown(_si(trafficDistribution="PreferSameRegion")) == "PreferSameRegion"
        assert unknown(_si({"isthmus.io/affinity": "nearby"}, trafficDistribution="PreferSameRegion")) == \
            "PreferSameRegion"
        assert unknown(_si({"isthmus.io/affinity": "local"}, trafficDistribution="PreferSameRegion")) is None
        assert unknown(_si(trafficDistribution="PreferClose")) is None
        assert unknown(_si()) is None
        assert unknown(None) is None
