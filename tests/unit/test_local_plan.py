"""The local clusterset's address plan: fixed, disjoint, inside 127.0.0.0/8."""

from __future__ import annotations

import ipaddress

import pytest

from isthmus.local import plan


def test_cluster_addresses_follow_the_documented_plan() -> None:
    c1, c2, c3 = plan.address_plan(3)
    assert (c1.name, c1.pod_cidr, c1.service_cidr, c1.clusterset_ip_cidr) == (
        "c1", "127.101.0.0/16", "127.201.0.0/16", "127.240.0.0/16")
    assert (c2.pod_cidr, c2.service_cidr, c2.clusterset_ip_cidr) == ("127.102.0.0/16", "127.202.0.0/16", "127.241.0.0/16")
    assert c3.clusterset_ip_cidr == "127.242.0.0/16"
    assert (c1.node_port_range, c2.node_port_range, c3.node_port_range) == ("30000-30499", "30500-30999", "31000-31499")


@pytest.mark.parametrize("n", [1, 2, 16, 17, 30])
def test_every_range_is_loopback_and_disjoint(n: int) -> None:
    clusters = plan.address_plan(n)
    broker = plan.broker_plan()  # runs workloads too: its pod and service CIDRs and NodePorts are its own
    nets0 = [ipaddress.IPv4Network(c) for cp in clusters for c in (cp.pod_cidr, cp.service_cidr, cp.clusterset_ip_cidr)]
    for own in (broker.pod_cidr, broker.service_cidr, "127.48.0.0/12"):
        assert not any(ipaddress.IPv4Network(own).overlaps(net) for net in nets0), own
    assert broker.node_port_high < min(cp.node_port_low for cp in clusters)
    nets = [ipaddress.IPv4Network(c) for cp in clusters for c in (cp.pod_cidr, cp.service_cidr, cp.clusterset_ip_cidr)]
    loopback = ipaddress.IPv4Network("127.0.0.0/8")
    vip_range = ipaddress.IPv4Network(plan.CLUSTERSET_IP_RANGE)
    assert all(net.subnet_of(loopback) for net in nets)
    assert all(ipaddress.IPv4Network(cp.clusterset_ip_cidr).subnet_of(vip_range) for cp in clusters)
    for i, a in enumerate(nets):
        for b in nets[i + 1:]:
            assert not a.overlaps(b), (a, b)
    ports = [set(range(cp.node_port_low, cp.node_port_high + 1)) for cp in clusters]
    assert sum(len(p) for p in ports) == len(set().union(*ports))


def test_vip_blocks_shrink_only_when_16_no_longer_fit() -> None:
    assert plan.vip_prefix(16) == 16
    assert plan.vip_prefix(17) == 17
    assert plan.address_plan(30)[29].clusterset_ip_cidr == "127.254.128.0/17"


@pytest.mark.parametrize("n", [0, -1, 31])
def test_cluster_count_is_bounded(n: int) -> None:
    with pytest.raises(plan.PlanError, match="between 1 and 30"):
        plan.address_plan(n)


def test_parts_start_with_the_apiservers_and_ports_cover_every_part() -> None:
    parts = plan.parts(2)
    names = [p.name for p in parts]
    assert names[:3] == ["broker-apiserver", "c1-apiserver", "c2-apiserver"]
    # The agent and DNS server are pods (deploy/member), not supervised processes; a member's
    # kube-lite is its node's proxy too; the web view watches every cluster, so it starts last.
    assert names[3:] == ["broker-kube-lite", "c1-kube-lite", "c2-kube-lite", "broker-ui"]
    assert [p.name for p in plan.pod_parts(2)] == ["broker-mcsvc-broker", "broker-pools"] + [
        f"{c}-{k}" for c in ("c1", "c2")
        for k in ("agent", "dns", "controller-manager", "pools", "webhook", "egress-gateway")
    ]
    ports = plan.port_names(2)
    assert len(ports) == len(set(ports))
    for p in parts:
        assert plan.metrics_port_name(p) in ports
    assert not any(any(k in p for k in plan.POD_KINDS) for p in ports)
    assert "broker-ui" in ports and plan.metrics_port_name(plan.PartId("broker", plan.UI)) == "broker-ui"


def test_pool_addresses_are_per_cluster_and_outside_every_other_range() -> None:
    import ipaddress

    clusters = plan.address_plan(plan.MAX_CLUSTERS)
    public = ipaddress.ip_network(plan.POOL_PUBLIC_RANGE)
    private = ipaddress.ip_network(plan.POOL_PRIVATE_RANGE)
    user = ipaddress.ip_network("127.48.0.0/12")
    seen: set[str] = set()
    for c in clusters:
        pub, priv = ipaddress.ip_address(c.pool_public_address), ipaddress.ip_address(c.pool_private_address)
        assert pub in public and priv in private
        for net in (c.pod_cidr, c.service_cidr, c.clusterset_ip_cidr, str(user)):
            assert pub not in ipaddress.ip_network(net) and priv not in ipaddress.ip_network(net)
        seen |= {c.pool_public_address, c.pool_private_address}
    assert len(seen) == 2 * len(clusters)
    assert not public.overlaps(user) and not private.overlaps(user)
    broker = plan.broker_plan()
    assert (broker.pool_public_address, broker.pool_private_address) == ("127.30.0.1", "127.31.0.1")
    assert not {broker.pool_public_address, broker.pool_private_address} & seen


def test_the_dns_node_port_is_the_last_of_each_cluster_range() -> None:
    cps = plan.address_plan(3)
    assert [plan.dns_node_port(c) for c in cps] == [30499, 30999, 31499]


def test_egress_ranges_are_per_cluster_and_outside_every_other_range() -> None:
    clusters = plan.address_plan(plan.MAX_CLUSTERS)
    egress = ipaddress.ip_network(plan.EGRESS_RANGE)
    demo = ipaddress.ip_network(plan.DEMO_OUTSIDE_RANGE)
    others = [ipaddress.ip_network(n) for n in ("127.48.0.0/12", plan.POOL_PUBLIC_RANGE, plan.POOL_PRIVATE_RANGE,
                                                plan.CLUSTERSET_IP_RANGE, "127.100.0.0/16", "127.200.0.0/16")]
    others += [ipaddress.ip_network(n) for c in clusters for n in (c.pod_cidr, c.service_cidr)]
    assert not any(egress.overlaps(o) or demo.overlaps(o) for o in others)
    assert not egress.overlaps(demo)
    seen: list[ipaddress.IPv4Network] = []
    for c in clusters:
        assert c.egress_range is not None
        first, last = (ipaddress.ip_address(a) for a in c.egress_range)
        block = ipaddress.ip_network(f"{first}/24", strict=False)
        assert first in egress and last in egress and last in block
        assert not any(block.overlaps(b) for b in seen)
        seen.append(block)
    assert plan.broker_plan().egress_range is None
    assert c.egress_range == (f"127.32.{plan.MAX_CLUSTERS}.1", f"127.32.{plan.MAX_CLUSTERS}.254")


def test_runc_plan_is_the_process_plan_moved_out_of_loopback() -> None:
    """runc mode: addresses that route between namespaces (never 127.0.0.0/8), the same shapes, and
    the same names and numbers as the network plan the namespaces are built from."""
    from isthmus.local.network.plan import fabric_plan

    loopback = ipaddress.ip_network("127.0.0.0/8")
    fabric = ipaddress.ip_network("10.255.0.0/24")
    for n in (3, 16, 30):
        fp = fabric_plan("/tmp/x", n, cs="isthmus-test")
        for c in plan.address_plan(n, plan.RUNC):
            assert not ipaddress.ip_network(c.clusterset_ip_cidr).overlaps(fabric), (n, c)
            assert c.clusterset_ip_cidr == fp.node(c.name).clusterset_ip_cidr
    n = 3
    fp = fabric_plan("/tmp/x", n, cs="isthmus-test")
    for c in [plan.broker_plan(plan.RUNC), *plan.address_plan(n, plan.RUNC)]:
        node = fp.node(c.name)
        assert (c.pod_cidr, c.service_cidr, c.node_address) == (node.pod_cidr, node.service_cidr, node.address)
        assert (c.pool_public_address, c.pool_private_address) == (node.edge_public, node.edge_private)
        assert c.clusterset_ip_cidr == node.clusterset_ip_cidr
        assert c.egress_range == node.egress_range
        for net in (c.pod_cidr, c.service_cidr, c.clusterset_ip_cidr):
            assert not ipaddress.ip_network(net).overlaps(loopback)
    # The process plan is unchanged by the runtime parameter's default.
    assert plan.cluster_plan(1, n) == plan.cluster_plan(1, n, plan.PROCESS)
    assert plan.cluster_plan(1, n).node_address == "127.0.0.1"


def test_runc_parts_add_the_relay_and_the_registry() -> None:
    names = [p.name for p in plan.parts(2, plan.RUNC)]
    assert names.index("broker-relay") > names.index("c2-apiserver")
    assert names.index("broker-registry") < names.index("broker-kube-lite")
    assert "broker-relay" not in [p.name for p in plan.parts(2)]
    assert "broker-registry" in plan.port_names(2, plan.RUNC)
    with pytest.raises(plan.PlanError, match="--runtime must be one of"):
        plan.cluster_plan(1, 2, "docker")
