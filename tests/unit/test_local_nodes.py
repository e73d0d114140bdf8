"""`isthmus up --nodes N`: the node plan (names, pod CIDR slices, parts, ports), what each node's
kube-lite is told, the state that records the count, and the bounds."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isthmus.cli.main import app
from isthmus.local import plan, up
from isthmus.local.state import Layout, State
from isthmus.local.status.addresses import cluster_nodes


def test_node_names_keep_the_one_node_name_for_node_1() -> None:
    assert [plan.node_name("c1", k) for k in (1, 2, 3)] == ["c1-node", "c1-node-2", "c1-node-3"]


def test_one_node_keeps_the_whole_pod_cidr() -> None:
    assert plan.node_pod_cidr("127.101.0.0/16", 1, 1) == "127.101.0.0/16"


@pytest.mark.parametrize("nodes", [2, 3, plan.MAX_NODES])
def test_nodes_get_disjoint_slash24_slices_of_the_cluster_pod_cidr(nodes: int) -> None:
    cluster = ipaddress.IPv4Network("10.101.0.0/16")
    slices = [ipaddress.IPv4Network(plan.node_pod_cidr(str(cluster), k, nodes)) for k in range(1, nodes + 1)]
    assert [str(s) for s in slices[:2]] == ["10.101.0.0/24", "10.101.1.0/24"]
    assert all(s.prefixlen == 24 and s.subnet_of(cluster) for s in slices)
    assert len({s.network_address for s in slices}) == nodes


@pytest.mark.parametrize("n", [0, -1, plan.MAX_NODES + 1])
def test_the_node_count_is_bounded(n: int) -> None:
    with pytest.raises(plan.PlanError, match=f"--nodes must be between 1 and {plan.MAX_NODES}, not {n}"):
        plan.validate_nodes(n)
    with pytest.raises(plan.PlanError):
        plan.parts(1, nodes=n)


def test_parts_have_one_kube_lite_per_node_and_the_broker_one() -> None:
    names = [p.name for p in plan.parts(2, nodes=3)]
    assert names == ["broker-apiserver", "c1-apiserver", "c2-apiserver", "broker-kube-lite",
                     "c1-kube-lite", "c1-kube-lite-2", "c1-kube-lite-3",
                     "c2-kube-lite", "c2-kube-lite-2", "c2-kube-lite-3", "broker-ui"]
    assert [p.name for p in plan.parts(2)] == [p.name for p in plan.parts(2, nodes=1)]
    ports = plan.port_names(2, nodes=3)
    assert len(ports) == len(set(ports))
    assert {"c1-kube-lite-kubelet", "c1-kube-lite-2-kubelet", "c1-kube-lite-2-metrics"} <= set(ports)


def test_runc_node_addresses_stay_put_for_node_1() -> None:
    assert plan.runc_node_address(1) == "10.255.0.11" == plan.runc_node_address(1, 1)
    assert plan.runc_node_address(1, 2) == "10.255.1.11"


def _argv(tmp_path: Path, nodes: int, part: plan.PartId) -> list[str]:
    state = State(clusters=2, nodes=nodes)
    up.resolve_ports(state, free=lambda port, udp: True)
    return up.part_argv(Layout.at(tmp_path), state, part)


def _opt(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_one_node_cluster_s_kube_lite_is_told_what_it_was_before(tmp_path: Path) -> None:
    argv = _argv(tmp_path, 1, plan.PartId("c1", plan.KUBE_LITE))
    assert "--node-name" not in argv and "--node-pod-cidr" not in argv and "--no-controllers" not in argv
    assert "--proxy" in argv and _opt(argv, "--pod-cidr") == "127.101.0.0/16"
    assert _opt(argv, "--root-dir") == str(tmp_path / "kubelet" / "c1")


def test_node_1_runs_the_controllers_and_the_proxy_the_others_only_their_pods(tmp_path: Path) -> None:
    first = _argv(tmp_path, 2, plan.PartId("c2", plan.KUBE_LITE))
    second = _argv(tmp_path, 2, plan.PartId("c2", plan.KUBE_LITE, 2))
    assert (_opt(first, "--node-name"), _opt(first, "--node-pod-cidr")) == ("c2-node", "127.102.0.0/24")
    assert (_opt(second, "--node-name"), _opt(second, "--node-pod-cidr")) == ("c2-node-2", "127.102.1.0/24")
    assert _opt(first, "--pod-cidr") == _opt(second, "--pod-cidr") == "127.102.0.0/16"
    assert "--no-controllers" not in first and "--no-controllers" in second
    # process mode: one host network, so one proxy (node 1's) serves every node's pods
    assert "--proxy" in first and "--proxy" not in second
    assert _opt(first, "--kubelet-port") != _opt(second, "--kubelet-port")
    assert _opt(second, "--root-dir") == str(tmp_path / "kubelet" / "c2-node-2")
    broker = _argv(tmp_path, 2, plan.PartId("broker", plan.KUBE_LITE))
    assert "--node-name" not in broker  # the broker has one node whatever --nodes


def test_the_state_records_the_node_count(tmp_path: Path) -> None:
    state = State(clusters=1, nodes=3)
    doc = state.to_json()
    assert doc["nodes"] == 3 and State.from_json(doc).nodes == 3
    del doc["nodes"]  # a state dir from before --nodes: one node
    assert State.from_json(doc).nodes == 1
    with pytest.raises(ValueError, match="nodes is 99"):
        State.from_json({**state.to_json(), "nodes": 99})


def test_status_lists_each_cluster_s_nodes() -> None:
    state = State(clusters=1, nodes=2)
    up.resolve_ports(state, free=lambda port, udp: True)
    nodes = cluster_nodes(state, plan.cluster_plan(1, 1))
    assert [(n["name"], n["podCIDR"], n["address"], n["controllers"]) for n in nodes] == [
        ("c1-node", "127.101.0.0/24", "127.0.0.1", True), ("c1-node-2", "127.101.1.0/24", "127.0.0.1", False)]


def test_up_refuses_a_node_count_out_of_bounds_or_other_than_the_state_dir_s(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["up", "--state-dir", str(tmp_path / "a"), "--nodes", "0"])
    assert r.exit_code == 2 and f"error: --nodes must be between 1 and {plan.MAX_NODES}, not 0" in r.output
    layout = Layout.at(tmp_path / "b")
    from isthmus.local.state import save_state

    layout.root.mkdir(mode=0o700)
    save_state(layout, State(clusters=1, nodes=2))
    r = runner.invoke(app, ["up", "--state-dir", str(layout.root), "--nodes", "3"])
    assert r.exit_code == 2 and "holds a clusterset of 2 node(s) per cluster, not 3" in r.output
    with pytest.raises(plan.PlanError, match="not 3"):
        up.prepare(layout, None, False, None, 3)


def test_runc_nodes_have_namespaces_addresses_and_pod_slices_of_their_own() -> None:
    from isthmus.local.network.plan import fabric_plan, ranges, summary

    fp = fabric_plan("/unused", 2, cs="isthmus-t-plan", nodes=3)
    assert [n.netns for n in fp.nodes] == ["isthmus-t-plan-broker", "isthmus-t-plan-c1", "isthmus-t-plan-c1-n2",
                                           "isthmus-t-plan-c1-n3", "isthmus-t-plan-c2", "isthmus-t-plan-c2-n2",
                                           "isthmus-t-plan-c2-n3"]
    one, two = fp.node("c2"), fp.node("c2", 2)
    assert (one.address, one.fabric_gateway, one.pod_cidr, one.pod_gateway) == (
        "10.255.0.12", "10.255.0.1", "10.102.0.0/24", "10.102.0.1")
    assert (two.address, two.fabric_gateway, two.pod_cidr, two.pod_gateway, two.name) == (
        "10.255.1.12", "10.255.1.1", "10.102.1.0/24", "10.102.1.1", "c2-node-2")
    assert all(len(n.fabric_veth) <= 15 for n in fabric_plan("/unused", 30, cs="x", nodes=plan.MAX_NODES).nodes)
    # the fabric routes each node's slice to it; the edge and egress ranges to node 1, which holds them
    assert one.routed == ("10.102.0.0/24", "10.30.2.0/24", "10.31.2.0/24", "10.32.2.0/24")
    assert two.routed == ("10.102.1.0/24",)
    assert two.pod_netns("abcdef12-3456-7890") == "isthmus-t-plan-c2-n2-abcdef123456"
    nets = [ipaddress.IPv4Network(r) for r in ranges(fp).values()]
    for i, a in enumerate(nets):
        assert not any(a.overlaps(b) for b in nets[i + 1:]), a
    assert "c2 (c2-node-2)" in summary(fp) and "10.255.1.12" in summary(fp)
    # one node: the plan as before
    single = fabric_plan("/unused", 2, cs="isthmus-t-plan")
    assert [(n.netns, n.address, n.pod_cidr) for n in single.nodes][1] == ("isthmus-t-plan-c1", "10.255.0.11",
                                                                            "10.101.0.0/16")


def test_runc_node_2_is_told_its_namespace_address_and_slice(tmp_path: Path) -> None:
    from isthmus.local import runcmode

    state = State(clusters=1, nodes=2, runtime=plan.RUNC)
    up.resolve_ports(state, free=lambda port, udp: True)
    argv = up.part_argv(Layout.at(tmp_path), state, plan.PartId("c1", plan.KUBE_LITE, 2))
    fp = runcmode.fabric_of(tmp_path, 1, 2)
    assert _opt(argv, "--netns") == fp.node("c1", 2).netns and _opt(argv, "--node-address") == "10.255.1.11"
    assert _opt(argv, "--node-pod-cidr") == "10.101.1.0/24" and _opt(argv, "--pod-cidr") == "10.101.0.0/16"
    # in runc mode every node is its own network: its own proxy (nftables in its namespace)
    assert "--proxy" in argv and "--no-controllers" in argv


def test_runc_s_hostnetwork_gateway_drops_the_pod_sysctls_its_kubelet_would_refuse() -> None:
    import yaml

    from isthmus.local.components import _runc_patches

    patches = {p["target"]["name"]: yaml.safe_load(p["patch"]) for p in _runc_patches(plan.cluster_plan(2, 2, plan.RUNC))}
    gateway = patches[plan.DEPLOYMENTS[plan.EGRESS_GATEWAY]]
    assert {"op": "add", "path": "/spec/template/spec/securityContext/sysctls", "value": []} in gateway
    assert not any(op["path"].endswith("nodeSelector") for ops in patches.values() for op in ops)  # any node
    assert _runc_patches(plan.cluster_plan(2, 2)) == []


def _pod(name: str, component: str, host: str, *, ready: bool, created: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": component}, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta, "status": {"hostIP": host, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_the_edge_routes_follow_the_pods_that_hold_the_addresses() -> None:
    from isthmus.local.network.plan import fabric_plan
    from isthmus.local.network.speaker import address_batches, edge_routes, route_batch

    fp = fabric_plan("/unused", 2, cs="isthmus-t-sp", nodes=2)
    nodes = [n for n in fp.nodes if n.cluster == "c2"]
    first, second = nodes
    start = {"10.30.2.0/24": first.address, "10.31.2.0/24": first.address, "10.32.2.0/24": first.address}
    assert edge_routes(first, nodes, [], {}) == start  # nothing scheduled: node 1, as the plan has it
    pods = [_pod("pools-a", "isthmus-pools", second.address, ready=False, created="2026-12-07T10:00:00Z"),
            _pod("gw-a", "isthmus-egress-gateway", first.address, ready=False, created="2026-12-07T10:00:01Z"),
            _pod("gw-b", "isthmus-egress-gateway", second.address, ready=True, created="2026-12-07T09:00:00Z")]
    routes = edge_routes(first, nodes, pods, start)
    # the pool manager on node 2 (scheduled, not ready yet: it needs its addresses first); the
    # gateway's ready pod (its leader) wins over a newer one that is not
    assert routes == {"10.30.2.0/24": second.address, "10.31.2.0/24": second.address, "10.32.2.0/24": second.address}
    # both gateway pods ready (readiness means healthy): the one labelled leader binds the source IPs
    both = [_pod("gw-a", "isthmus-egress-gateway", first.address, ready=True, created="2026-12-07T10:00:01Z"),
            _pod("gw-b", "isthmus-egress-gateway", second.address, ready=True, created="2026-12-07T09:00:00Z")]
    both[1]["metadata"]["labels"]["egress.isthmus.io/leader"] = "true"
    assert edge_routes(first, nodes, both, start)["10.32.2.0/24"] == second.address
    # drained from node 2: a terminating pod holds nothing, and with no other the route stays put
    gone = [_pod("pools-a", "isthmus-pools", second.address, ready=True, created="2026-12-07T10:00:00Z",
                 deleting=True)]
    assert edge_routes(first, nodes, gone, routes)["10.30.2.0/24"] == second.address
    # sticky: a newer ready pool manager (a rollout's) does not take the addresses from a ready holder;
    # once the holder's replica is not ready (its lame duck at SIGTERM) or terminating, they move once
    held = {**start, "10.30.2.0/24": second.address, "10.31.2.0/24": second.address}
    holder = _pod("pools-a", "isthmus-pools", second.address, ready=True, created="2026-12-07T10:00:00Z")
    newer = _pod("pools-b", "isthmus-pools", first.address, ready=True, created="2026-12-07T10:05:00Z")
    assert edge_routes(first, nodes, [holder, newer], held)["10.30.2.0/24"] == second.address
    stopping = _pod("pools-a", "isthmus-pools", second.address, ready=False, created="2026-12-07T10:00:00Z")
    assert edge_routes(first, nodes, [stopping, newer], held)["10.31.2.0/24"] == first.address
    # a pod elsewhere than on this cluster's nodes is ignored
    assert edge_routes(first, nodes, [_pod("x", "isthmus-pools", "10.255.0.11", ready=True,
                                           created="2026-12-07T11:00:00Z")], start) == start
    assert route_batch({"10.30.2.0/24": second.address}) == "route replace 10.30.2.0/24 via 10.255.1.12 dev fabric0\n"
    assert address_batches(nodes, routes) == (
        [(second.netns, "addr replace 10.30.2.1/32 dev edge0\naddr replace 10.31.2.1/32 dev edge0\n")],
        [(first.netns, "addr del 10.30.2.1/32 dev edge0\naddr del 10.31.2.1/32 dev edge0\n")])


def test_image_load_reaches_every_node_s_store(tmp_path: Path) -> None:
    from isthmus.cli.image import _nodes
    from isthmus.local.state import save_state

    layout = Layout.at(tmp_path / "st")
    layout.root.mkdir(mode=0o700)
    save_state(layout, State(clusters=2, nodes=2))
    assert _nodes(layout.root)[1] == ["broker", "c1", "c1-node-2", "c2", "c2-node-2"]
    argv = _argv(tmp_path / "st", 2, plan.PartId("c2", plan.KUBE_LITE, 2))
    assert _opt(argv, "--root-dir") == str(layout.root / "kubelet" / "c2-node-2")  # where `load` puts them


def test_oom_score_adj_never_goes_below_what_kube_lite_may_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """A system-cluster-critical Pod (-997) where kube-lite lacks CAP_SYS_RESOURCE: runc would fail the
    container ("can't get final child's PID from pipe"); its floor is kube-lite's own value."""
    from isthmus.local.kubelite import oci

    container: dict[str, Any] = {"name": "dns", "image": "x"}
    pod: dict[str, Any] = {"metadata": {"name": "dns", "namespace": "isthmus-system", "uid": "u"},
                           "spec": {"priority": 2_000_000_000, "containers": [container]}}
    spec = oci.runtime_spec(pod=pod, container=container, image=oci.ImageConfig(),
                            argv=["x"], env=[], mounts=[], rootfs="/r", netns_path=None, cgroups_path="/c",
                            hostname="h", devices=lambda: [], oom_score_floor=0)
    assert spec["process"]["oomScoreAdj"] == 0


def test_the_apiserver_reaches_the_kubelet_of_every_runc_node() -> None:
    """`kubectl logs` of a pod on node 2 (10.255.1.11): its kube-lite listens on this machine's loopback."""
    from types import SimpleNamespace

    from isthmus.apiserver.handlers.pods import _kubelet

    def node(address: str) -> dict[str, Any]:
        return {"status": {"addresses": [{"type": "InternalIP", "address": address}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}

    ctx = SimpleNamespace(storage=SimpleNamespace(get=lambda prefix, ns, name: node(
        {"c1-node": "10.255.0.11", "c1-node-2": "10.255.1.11", "far": "10.254.0.1"}[name])))
    assert _kubelet(ctx, "c1-node") == ("127.0.0.1", 10250)  # type: ignore[arg-type]
    assert _kubelet(ctx, "c1-node-2") == ("127.0.0.1", 10250)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="not a loopback address"):
        _kubelet(ctx, "far")  # type: ignore[arg-type]


def test_down_unmounts_what_a_killed_kube_lite_left_mounted(tmp_path: Path) -> None:
    """`runc delete --force` of a leftover container leaves the rootfs overlay kube-lite mounted for it."""
    from isthmus.local.runcmode import leftover_mounts

    root = tmp_path / "st"
    mounts = "\n".join([
        f"overlay {root}/kubelet/c1/pods/u1/containers/web/0/rootfs overlay rw 0 0",
        f"tmpfs {root}/kubelet/c1-node-2/pods/u2/volumes/kube-api-access tmpfs rw 0 0",
        f"overlay {root}/kubelet/c1-node-2/pods/u2/containers/web/0/rootfs overlay rw 0 0",
        f"tmpfs {root}/kubelet/c1/pods/u1/with\\040space tmpfs rw 0 0",
        f"overlay {tmp_path}/other/kubelet/c1/pods/u/containers/x/0/rootfs overlay rw 0 0",
        "proc /proc proc rw 0 0",
    ])
    points = leftover_mounts(root, mounts)
    assert sorted(points) == sorted([
        f"{root}/kubelet/c1/pods/u1/containers/web/0/rootfs", f"{root}/kubelet/c1-node-2/pods/u2/volumes/kube-api-access",
        f"{root}/kubelet/c1-node-2/pods/u2/containers/web/0/rootfs", f"{root}/kubelet/c1/pods/u1/with space"])
    assert points[0].count("/") >= points[-1].count("/")  # deepest first


def test_a_pods_namespace_is_named_after_its_nodes() -> None:
    from isthmus.local.network.plan import pod_netns_name

    uid = "0123abcd-4567-89ef-0000-111122223333"
    assert pod_netns_name("isthmus-1234", "c1", uid) == "isthmus-1234-c1-0123abcd4567"
    assert pod_netns_name("isthmus-1234", "c1", uid, "c1-node") == "isthmus-1234-c1-0123abcd4567"
    assert pod_netns_name("isthmus-1234", "c1", uid, "c1-node-2") == "isthmus-1234-c1-n2-0123abcd4567"


def test_the_gateway_has_a_standby_on_another_node_when_the_cluster_has_several(tmp_path: Path) -> None:
    """With one gateway a drain of its node leaves no leader until a new pod starts elsewhere (egress
    refused meanwhile); a second replica on the other node takes the Lease over at once."""
    from isthmus.kube.manifests import deploy_dir, render
    from isthmus.local import components

    name = plan.DEPLOYMENTS[plan.EGRESS_GATEWAY]
    for nodes, want in ((1, 1), (2, 2), (3, 2)):
        directory = components.overlay(plan.cluster_plan(1, 2), deploy_dir(), tmp_path / f"c1-{nodes}",
                                       tmp_path / "pools", nodes=nodes)
        [gateway] = [o for o in render(directory) if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
        assert gateway["spec"]["replicas"] == want, nodes


def test_a_moved_pool_address_keeps_established_flows_on_the_node_they_began_on() -> None:
    """New flows go to the holder; a flow that began on the old one stays pinned there (the fabric marks
    it at its first packet) and that node keeps the addresses while its pool manager pod exists."""
    import shutil
    import subprocess

    from isthmus.local.network.plan import fabric_plan
    from isthmus.local.network.speaker import address_batches, pin_mark, pin_routes, pin_rules, pool_nodes

    nodes = [n for n in fabric_plan("/unused", 2, cs="isthmus-t-pin", nodes=2).nodes if n.cluster == "c1"]
    first, second = nodes
    leaving = _pod("pools-a", "isthmus-pools", first.address, ready=False, created="2026-12-07T10:00:00Z")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-07T11:00:00Z"
    staying = _pod("pools-b", "isthmus-pools", second.address, ready=True, created="2026-12-07T10:00:01Z")
    assert pool_nodes(nodes, [leaving, staying]) == {first.address}  # terminating: still finishing flows
    assert pool_nodes(nodes, [staying]) == set()
    routes = {"10.30.1.0/24": second.address, "10.31.1.0/24": second.address}
    add, remove = address_batches(nodes, routes, keep=pool_nodes(nodes, [leaving, staying]))
    assert [ns for ns, _ in add] == [second.netns] and remove == []  # the old holder keeps them meanwhile
    add, remove = address_batches(nodes, routes, keep=pool_nodes(nodes, [staying]))
    assert [ns for ns, _ in remove] == [first.netns]  # its pool manager gone: off
    assert pin_mark(first) != pin_mark(second)
    rules = pin_rules(first, second)
    assert f"ct state new ct mark set {pin_mark(second)}" in rules and "meta mark set ct mark" in rules
    assert f"route replace 10.31.1.0/24 via {first.address} dev fabric0 table {pin_mark(first)}" in \
        pin_routes(first, nodes)
    nft = shutil.which("nft")
    assert nft is not None, "nft (Debian's nftables) is needed: make installs it"
    check = subprocess.run([nft, "-c", "-f", "-"], input=rules.split("\n", 2)[2], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr  # the kernel accepts the ruleset (check mode: nothing loaded)
