"""The runc-mode address plan (local/network/plan.py): names and ranges as docs/network.md gives them."""

from __future__ import annotations

import ipaddress
import itertools
from pathlib import Path

import pytest

from isthmus.local import plan as process_plan
from isthmus.local.network import plan


def test_the_clusterset_id_comes_from_the_absolute_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "st").mkdir()
    cs = plan.clusterset_id(tmp_path / "st")
    assert cs == plan.clusterset_id("st") == plan.clusterset_id(tmp_path / "st" / ".." / "st")
    assert cs.startswith("isthmus-") and len(cs) == len("isthmus-") + 8
    assert cs != plan.clusterset_id(tmp_path / "other")


def test_names_of_the_fabric_nodes_and_pods() -> None:
    p = plan.fabric_plan("/unused", 2, cs="isthmus-1a2b3c4d")
    assert p.netns == "isthmus-1a2b3c4d" and p.netns_path == "/run/netns/isthmus-1a2b3c4d"
    assert [n.cluster for n in p.nodes] == ["broker", "c1", "c2"]
    assert p.namespaces() == ["isthmus-1a2b3c4d", "isthmus-1a2b3c4d-broker", "isthmus-1a2b3c4d-c1",
                              "isthmus-1a2b3c4d-c2"]
    c1 = p.node("c1")
    assert c1.pod_netns("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0") == "isthmus-1a2b3c4d-c1-0f1e2d3c4b5a"
    assert c1.fabric_veth == "v-c1"
    assert all(len(n.fabric_veth) <= 15 for n in plan.fabric_plan("/x", 30, cs="isthmus-t").nodes)
    assert p.owns("isthmus-1a2b3c4d-c1-0f1e2d3c4b5a") and not p.owns("isthmus-1a2b3c4e")
    with pytest.raises(plan.PlanError, match="no cluster 'c3'"):
        p.node("c3")


def test_addresses_follow_the_design() -> None:
    p = plan.fabric_plan("/unused", 3, cs="isthmus-t")
    broker, c2 = p.node("broker"), p.node("c2")
    assert (broker.address, broker.pod_cidr, broker.service_cidr, broker.edge_public, broker.edge_private) == (
        "10.255.0.10", "10.100.0.0/16", "10.200.0.0/16", "10.30.0.1", "10.31.0.1")
    assert broker.egress_range is None and broker.clusterset_ip_cidr == "10.240.0.0/12"
    assert (c2.address, c2.pod_cidr, c2.pod_gateway, c2.pod_range_start, c2.service_cidr) == (
        "10.255.0.12", "10.102.0.0/16", "10.102.0.1", "10.102.0.2", "10.202.0.0/16")
    assert (c2.edge_public, c2.edge_private, c2.egress_range) == ("10.30.2.1", "10.31.2.1", ("10.32.2.1", "10.32.2.254"))
    assert c2.routed == ("10.102.0.0/16", "10.30.2.0/24", "10.31.2.0/24", "10.32.2.0/24")
    assert (p.gateway, p.registry) == ("10.255.0.1", "10.255.0.2:5000")


@pytest.mark.parametrize("n", [1, 3, 15, 17, 30])
def test_vip_blocks_split_as_the_process_plan_does(n: int) -> None:
    p = plan.fabric_plan("/unused", n, cs="isthmus-t")
    for i in range(1, n + 1):
        moved = process_plan.cluster_plan(i, n).clusterset_ip_cidr.replace("127.", "10.", 1)
        assert p.node(f"c{i}").clusterset_ip_cidr == moved
        assert p.node(f"c{i}").node_port_high == process_plan.cluster_plan(i, n).node_port_high


@pytest.mark.parametrize("n", [1, 3, 16, 30])
def test_no_range_overlaps_another_or_loopback(n: int) -> None:
    ranges = plan.ranges(plan.fabric_plan("/unused", n, cs="isthmus-t"))
    nets = {what: ipaddress.IPv4Network(cidr) for what, cidr in ranges.items()}
    assert len([w for w in nets if w.endswith("clusterset IPs")]) == n
    for (a, na), (b, nb) in itertools.combinations(nets.items(), 2):
        assert not na.overlaps(nb), f"{a} {na} overlaps {b} {nb}"
    for what, net in nets.items():
        assert not net.overlaps(ipaddress.IPv4Network("127.0.0.0/8")), what
        if what.endswith("clusterset IPs"):
            assert net.subnet_of(ipaddress.IPv4Network(plan.CLUSTERSET_IP_RANGE)), what


def test_sixteen_clusters_keep_their_vips_off_the_fabric() -> None:
    """The process plan gives c16 the range's last /16; here that is the fabric's 10.255.0.0/16."""
    assert plan.fabric_plan("/unused", 16, cs="isthmus-t").node("c16").clusterset_ip_cidr == "10.247.128.0/17"
    assert plan.fabric_plan("/unused", 15, cs="isthmus-t").node("c15").clusterset_ip_cidr == "10.254.0.0/16"


def test_too_many_clusters_is_refused() -> None:
    with pytest.raises(plan.PlanError, match="between 1 and 30"):
        plan.fabric_plan("/unused", 31, cs="isthmus-t")


def test_the_summary_names_every_node() -> None:
    text = plan.summary(plan.fabric_plan("/unused", 2, cs="isthmus-t"))
    assert "fabric isthmus-t: fabric0 10.255.0.1/24" in text and "10.255.0.2:5000" in text
    c2 = next(line for line in text.splitlines() if line.startswith("c2 "))
    assert c2.split() == ["c2", "isthmus-t-c2", "10.255.0.12", "10.102.0.0/16", "10.202.0.0/16", "10.241.0.0/16",
                          "10.30.2.1", "10.31.2.1", "10.32.2.1-254", "30500-30999"]
