"""assign_service: what a Service gets, keeps, and is warned about."""

from __future__ import annotations

from typing import Any

from isthmus.local.kubelite.ipam import IPPool, PortPool
from isthmus.local.kubelite.services import CLUSTER_IP_NOT_ALLOCATED, NODE_PORT_NOT_ALLOCATED, assign_service


def pools() -> tuple[IPPool, PortPool]:
    return IPPool("127.201.0.0/24"), PortPool(30000, 30009)


def svc(**spec: Any) -> dict[str, Any]:
    spec.setdefault("ports", [{"port": 80, "protocol": "TCP"}])
    return {"metadata": {"name": "s", "namespace": "d"}, "spec": spec}


def test_cluster_ip_allocated_with_families() -> None:
    ips, ports = pools()
    out = assign_service(svc(type="ClusterIP"), "d/s", ips, ports)
    assert out.spec is not None and not out.warnings
    assert out.spec["clusterIP"] == "127.201.0.1" and out.spec["clusterIPs"] == ["127.201.0.1"]
    assert out.spec["ipFamilies"] == ["IPv4"] and out.spec["ipFamilyPolicy"] == "SingleStack"
    # Stable: applying again changes nothing.
    again = assign_service({"spec": out.spec}, "d/s", ips, ports)
    assert again.spec is None and len(ips) == 1


def test_no_type_is_cluster_ip() -> None:
    ips, ports = pools()
    out = assign_service(svc(), "d/s", ips, ports)
    assert out.spec is not None and out.spec["clusterIP"]


def test_headless_gets_families_only_and_external_name_is_left_alone() -> None:
    """kube's defaults on headless Services (the MCS ServiceImport's ipFamilies come from them)."""
    ips, ports = pools()
    out = assign_service(svc(clusterIP="None", selector={"app": "a"}), "d/h", ips, ports)
    assert out.spec is not None and out.spec["clusterIP"] == "None" and "clusterIPs" not in out.spec
    assert out.spec["ipFamilies"] == ["IPv4"] and out.spec["ipFamilyPolicy"] == "SingleStack"
    assert assign_service({"spec": out.spec}, "d/h", ips, ports).spec is None, "stable"
    bare = assign_service(svc(clusterIP="None"), "d/b", ips, ports)
    assert bare.spec is not None and bare.spec["ipFamilyPolicy"] == "RequireDualStack", "no selector"
    asked = assign_service(svc(clusterIP="None", selector={"app": "a"}, ipFamilyPolicy="PreferDualStack"),
                           "d/p", ips, ports)
    assert asked.spec is not None and asked.spec["ipFamilyPolicy"] == "PreferDualStack"
    assert asked.spec["ipFamilies"] == ["IPv4"]
    assert assign_service(svc(type="ExternalName", externalName="x.org"), "d/e", ips, ports).spec is None
    assert len(ips) == 0


def test_a_dual_stack_preference_is_kept_on_a_single_stack_cluster() -> None:
    ips, ports = pools()
    out = assign_service(svc(ipFamilyPolicy="PreferDualStack"), "d/s", ips, ports)
    assert out.spec is not None and out.spec["ipFamilyPolicy"] == "PreferDualStack"
    assert out.spec["ipFamilies"] == ["IPv4"]


def test_node_ports_allocated_unique_and_kept() -> None:
    ips, ports = pools()
    spec = svc(type="NodePort", ports=[{"port": 80}, {"port": 81, "nodePort": 30005}])
    out = assign_service(spec, "d/s", ips, ports)
    assert out.spec is not None
    nps = [p["nodePort"] for p in out.spec["ports"]]
    assert nps[1] == 30005 and nps[0] != 30005 and 30000 <= nps[0] <= 30009
    other = assign_service(svc(type="LoadBalancer"), "d/t", ips, ports)
    assert other.spec is not None and other.spec["ports"][0]["nodePort"] not in nps


def test_taken_and_outside_values_warned_and_left() -> None:
    ips, ports = pools()
    first = assign_service(svc(type="NodePort"), "d/a", ips, ports)
    assert first.spec is not None
    ip, np = first.spec["clusterIP"], first.spec["ports"][0]["nodePort"]
    dup = assign_service(
        svc(type="NodePort", clusterIP=ip, ports=[{"port": 80, "nodePort": np}]), "d/b", ips, ports
    )
    reasons = [r for r, _ in dup.warnings]
    assert reasons == [CLUSTER_IP_NOT_ALLOCATED, NODE_PORT_NOT_ALLOCATED]
    assert "already allocated to Service d/a" in dup.warnings[0][1]
    assert dup.spec is None  # left as the user wrote it
    assert ips.owner_of(ip) == "d/a" and ports.held("d/b") == []
    outside = assign_service(svc(clusterIP="127.9.9.9"), "d/c", ips, ports)
    assert outside.spec is None and "outside the service CIDR 127.201.0.0/24" in outside.warnings[0][1]
    far = assign_service(
        svc(type="NodePort", clusterIP="None", ports=[{"port": 1, "nodePort": 40000}]), "d/e", ips, ports
    )
    assert "outside the node port range 30000-30009" in far.warnings[0][1]


def test_type_change_releases_node_ports() -> None:
    ips, ports = pools()
    out = assign_service(svc(type="NodePort"), "d/s", ips, ports)
    assert out.spec is not None and len(ports) == 1
    back = assign_service({"spec": {**out.spec, "type": "ClusterIP"}}, "d/s", ips, ports)
    assert back.spec is not None and "nodePort" not in back.spec["ports"][0]
    assert len(ports) == 0 and len(ips) == 1
    gone = assign_service({"spec": {**back.spec, "type": "ExternalName"}}, "d/s", ips, ports)
    assert gone.spec is None and len(ips) == 0


def test_full_pool_is_reported() -> None:
    ips, ports = IPPool("127.201.0.0/30"), PortPool(30000, 30000)
    assign_service(svc(), "d/a", ips, ports)
    assign_service(svc(), "d/b", ips, ports)
    out = assign_service(svc(), "d/c", ips, ports)
    assert out.full and out.spec is None and "no free address" in out.warnings[0][1]
