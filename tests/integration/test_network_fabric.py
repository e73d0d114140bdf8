"""The runc-mode network (local/network/) in namespaces this test makes and removes: the fabric, a
node per cluster, pods attached by the real CNI plugins, the relay's doors, `isthmus shell`.

Needs root, iproute2 and Debian's containernetworking-plugins (the Makefile installs them); it
fails, never skips, without them. Every namespace is named `isthmus-t-<pid>-...` and deleted at
the end; nothing is added to the host's own namespace (the last test checks).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from isthmus.local.network import cni, fabric
from isthmus.local.network.plan import FabricPlan, fabric_plan
from isthmus.runtime import netns

ROOT = Path(__file__).resolve().parents[2]


def _need() -> None:
    missing = [what for what, ok in (
        ("root", os.geteuid() == 0), ("ip (iproute2)", shutil.which("ip") is not None),
        ("nft (nftables)", shutil.which("nft") is not None),
        ("the CNI plugins in /usr/lib/cni (containernetworking-plugins)",
         all((cni.CNI_BIN / p).exists() for p in ("bridge", "host-local", "loopback"))),
    ) if not ok]
    if missing:
        pytest.fail("the runc-mode network test needs " + ", ".join(missing) + " (`make install` installs them)")


def _host_view() -> tuple[str, ...]:
    """What the host's own namespace looks like (no lifetimes, which tick)."""
    return tuple(subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout
                 for args in (["-br", "addr"], ["route"], ["-br", "link"], ["rule"]))


def _cs(tag: str) -> str:
    return f"isthmus-t-{os.getpid()}-{tag}"


@pytest.fixture(scope="module")
def fab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FabricPlan, Path]]:
    """A broker and two clusters' fabric, removed at the end whatever happens."""
    _need()
    plan = fabric_plan("/unused", 2, cs=_cs("f"))
    try:
        fabric.ensure(plan)
        yield plan, tmp_path_factory.mktemp("cni")
    finally:
        fabric.teardown(plan)


def _pod_network(plan: FabricPlan, cluster: str, data: Path) -> cni.PodNetwork:
    node = plan.node(cluster)
    return cni.PodNetwork(node.netns, node.pod_cidr, node.pod_gateway, data / cluster)


async def _echo_server(path: str, host: str, port: int) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        peer = writer.get_extra_info("peername")[0]
        writer.write(data + f" from {peer}".encode())
        await writer.drain()
        writer.close()

    return await netns.start_server_in(path, answer, host, port)


async def _ask(path: str | None, host: str, port: int, text: str = "hello") -> str:
    if path is None:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    else:
        reader, writer = await netns.open_connection_in(path, host, port)
    writer.write(text.encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data.decode()


async def test_pods_reach_each_other_across_clusters_and_the_fabric_reaches_every_edge(
        fab: tuple[FabricPlan, Path]) -> None:
    plan, data = fab
    c1, c2 = _pod_network(plan, "c1", data), _pod_network(plan, "c2", data)
    p1, ip1 = await c1.attach(plan.node("c1").pod_netns("11111111-aaaa"), "sandbox-a")
    p2, ip2 = await c2.attach(plan.node("c2").pod_netns("22222222-bbbb"), "sandbox-b")
    assert ip1 == "10.101.0.2" and ip2 == "10.102.0.2"
    server = await _echo_server(p2, "0.0.0.0", 8080)
    try:
        # A flat network: c2's pod sees c1's pod by its own address (no NAT on the way).
        assert await _ask(p1, ip2, 8080) == f"hello from {ip1}"
    finally:
        server.close()
    for node in plan.nodes:
        edge = await _echo_server(node.netns_path, node.edge_public, 9000)
        try:
            assert await _ask(plan.netns_path, node.edge_public, 9000, "edge") == "edge from 10.255.0.1"
            # and a pod of another cluster reaches it too, from its pod IP
            assert await _ask(p1, node.edge_public, 9000, "edge") == f"edge from {ip1}"
        finally:
            edge.close()
    await c1.detach(plan.node("c1").pod_netns("11111111-aaaa"), "sandbox-a")
    await c2.detach(plan.node("c2").pod_netns("22222222-bbbb"), "sandbox-b")


async def test_del_releases_the_address_and_is_idempotent(fab: tuple[FabricPlan, Path]) -> None:
    plan, data = fab
    net = _pod_network(plan, "broker", data)
    name = plan.node("broker").pod_netns("33333333")
    path, ip = await net.attach(name, "sandbox-c")
    assert net.allocated() == {ip: "sandbox-c"} and ip.startswith("10.100.0.")
    with pytest.raises(cni.CNIError) as err:
        await net.add(path, "sandbox-c")  # its eth0 is there already
    assert str(err.value) == 'plugin type="bridge" failed (add): container veth name provided (eth0) already exists'
    assert err.value.sandbox_message("sandbox-c").startswith('failed to setup network for sandbox "sandbox-c": plugin')
    await net.check(path, "sandbox-c")
    assert await net.attach(name, "sandbox-c") == (path, ip)  # attached already (kube-lite restarted): kept
    await net.detach(name, "sandbox-c")
    assert net.allocated() == {} and not netns.exists(name)
    await net.detach(name, "sandbox-c")  # a second DEL, the namespace gone: still fine
    links = (await netns.run_in(None, ["ip", "-n", plan.node("broker").netns, "-br", "link", "show", "master",
                                       "cni0"])).check().stdout.decode()
    assert links.strip() == "", links  # the pod's veth went with it


async def test_a_pod_reaches_a_pod_of_its_own_node_through_a_dnat_as_kube_proxy_sets_it(
        fab: tuple[FabricPlan, Path]) -> None:
    """A ClusterIP whose endpoint is on the caller's own node: the answer is bridged back on cni0,
    and only passes the node's conntrack (to be translated back) with bridge netfilter."""
    plan, data = fab
    assert fabric.bridge_netfilter(), "the kernel has no br_netfilter (modprobe br_netfilter)"
    node = plan.node("c2")
    net = _pod_network(plan, "c2", data)
    (pa, ipa), (pb, ipb) = [await net.attach(node.pod_netns(uid), f"sandbox-{uid}") for uid in ("66666666", "77777777")]
    rules = (f"table ip t {{\n chain pre {{\n type nat hook prerouting priority -100;\n"
             f" ip daddr 10.202.0.10 tcp dport 80 dnat to {ipb}:8080\n }}\n}}\n")
    (await netns.run_in(node.netns_path, ["nft", "-f", "-"], input=rules.encode())).check()
    server = await _echo_server(pb, "0.0.0.0", 8080)
    try:
        assert await _ask(pa, "10.202.0.10", 80, "svc") == f"svc from {ipa}"
    finally:
        server.close()
        (await netns.run_in(node.netns_path, ["nft", "delete", "table", "ip", "t"])).check()
        for uid in ("66666666", "77777777"):
            await net.detach(node.pod_netns(uid), f"sandbox-{uid}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_relay_opens_the_hosts_loopback_to_pods_and_a_pod_to_the_host(
        fab: tuple[FabricPlan, Path]) -> None:
    plan, data = fab
    net = _pod_network(plan, "c1", data)
    name = plan.node("c1").pod_netns("44444444")
    path, ip = await net.attach(name, "sandbox-d")
    host_server = await asyncio.start_server(_host_answer, "127.0.0.1", 0)
    api_port = host_server.sockets[0].getsockname()[1]
    pod_server = await _echo_server(path, "0.0.0.0", 5000)
    published, metrics = _free_port(), _free_port()
    relay = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "netrelay", "--netns", plan.netns,
        "--listen", f"10.255.0.1:{api_port}=127.0.0.1:{api_port}", "--publish", f"127.0.0.1:{published}={ip}:5000",
        "--metrics-addr", f"127.0.0.1:{metrics}", env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        await asyncio.to_thread(_wait_ready, metrics, relay)
        assert await _ask(path, "10.255.0.1", api_port, "api") == "api from host 127.0.0.1"
        assert await _ask(None, "127.0.0.1", published, "push") == "push from 10.255.0.1"
    finally:
        if relay.returncode is None:
            relay.send_signal(signal.SIGTERM)
        out = (await asyncio.wait_for(relay.communicate(), 10))[0].decode()
        host_server.close()
        pod_server.close()
        await net.detach(name, "sandbox-d")
    assert relay.returncode == 0, out


async def _host_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    data = await reader.read(100)
    writer.write(data + f" from host {writer.get_extra_info('peername')[0]}".encode())
    await writer.drain()
    writer.close()


def _wait_ready(port: int, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and proc.returncode is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("netrelay never became ready")


def _shell(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "isthmus", "shell", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=30)


def test_shell_runs_inside_the_clustersets_network(fab: tuple[FabricPlan, Path], tmp_path: Path) -> None:
    plan, _ = fab
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "clusters": 2, "runtime": "runc",
                                                     "netns": plan.netns}))
    fabric_addrs = _shell("--state-dir", str(tmp_path), "--", "ip", "-br", "addr", "show", "fabric0")
    assert fabric_addrs.returncode == 0 and "10.255.0.1/24 10.255.0.2/24" in fabric_addrs.stdout, fabric_addrs
    node = _shell("--state-dir", str(tmp_path), "--node", "c2", "--", "sh", "-c", "ip -br addr show eth0; exit 3")
    assert node.returncode == 3 and "10.255.0.12/24" in node.stdout, node
    bad_node = _shell("--state-dir", str(tmp_path), "--node", "c7", "--", "true")
    assert bad_node.returncode == 2 and bad_node.stderr.startswith("error: --node: cluster index 7 outside 1..2")
    (tmp_path / "state.json").write_text(json.dumps({"version": 1, "clusters": 2, "runtime": "process"}))
    process = _shell("--state-dir", str(tmp_path), "--", "true")
    assert process.returncode == 2 and process.stderr.count("\n") == 1 and "runs pods as processes" in process.stderr
    none = _shell("--state-dir", str(tmp_path / "nothing"), "--", "true")
    assert none.returncode == 2 and none.stderr.startswith("error: no local clusterset in "), none.stderr


def _routes(name: str) -> list[str]:
    """The routes of a namespace, without the flag that tells the bridge's ports are still coming up."""
    out = subprocess.run(["ip", "-n", name, "route"], capture_output=True, text=True, check=True).stdout
    return [line.replace(" linkdown", "").strip() for line in out.splitlines()]


async def test_ensure_is_idempotent_and_teardown_leaves_nothing_behind(tmp_path: Path) -> None:
    _need()
    before = _host_view()
    plan = fabric_plan("/unused", 1, cs=_cs("t"))
    try:
        fabric.ensure(plan)
        routes = _routes(plan.netns)
        fabric.ensure(plan)
        assert _routes(plan.netns) == routes and len(routes) == 9, routes  # 4 per node and fabric0's own
        # A node namespace removed while something still holds it lives on, cabled to the fabric:
        # ensure() makes a new one and cables that instead.
        held = netns.socket_in(plan.node("c1").netns_path)
        try:
            netns.delete(plan.node("c1").netns)
            fabric.ensure(plan)
        finally:
            held.close()
        edge = await _echo_server(plan.node("c1").netns_path, plan.node("c1").edge_private, 9000)
        try:
            assert await _ask(plan.netns_path, plan.node("c1").edge_private, 9000, "again") == "again from 10.255.0.1"
        finally:
            edge.close()
        net = _pod_network(plan, "c1", tmp_path)
        await net.attach(plan.node("c1").pod_netns("55555555"), "sandbox-e")
        assert _host_view() == before
    finally:
        removed = fabric.teardown(plan)
    assert sorted(removed) == sorted([*plan.namespaces(), plan.node("c1").pod_netns("55555555")])
    assert not [n for n in netns.names() if plan.owns(n)]
    assert _host_view() == before


async def test_two_nodes_of_a_cluster_route_each_others_pod_slices_and_reach_the_registry(tmp_path: Path) -> None:
    """`up --nodes 2`: node 2 in its own namespace on 10.255.1.0/24; each node's pods get its /24 of
    the cluster's pod CIDR; a pod on node 1 reaches a pod on node 2 by its own address (the fabric
    routes the slices), a DNAT on node 1 to node 2's pod works (a ClusterIP's path), and node 2
    and its pods reach the fabric's registry address (the edge addresses: the next test)."""
    _need()
    before = _host_view()
    plan = fabric_plan("/unused", 1, cs=_cs("n"), nodes=2)
    try:
        fabric.ensure(plan)
        one, two = plan.node("c1", 1), plan.node("c1", 2)
        assert (two.netns, two.address, two.pod_cidr) == (f"{plan.id}-c1-n2", "10.255.1.11", "10.101.1.0/24")
        nets = [cni.PodNetwork(n.netns, n.pod_cidr, n.pod_gateway, tmp_path / n.netns) for n in (one, two)]
        p1, ip1 = await nets[0].attach(one.pod_netns("11111111-aaaa"), "sandbox-a")
        p2, ip2 = await nets[1].attach(two.pod_netns("22222222-bbbb"), "sandbox-b")
        assert (ip1, ip2) == ("10.101.0.2", "10.101.1.2")
        server = await _echo_server(p2, "0.0.0.0", 8080)
        try:
            assert await _ask(p1, ip2, 8080) == f"hello from {ip1}"
            rules = ("table ip t {\n chain out {\n type nat hook output priority -100;\n"
                     f" ip daddr 10.201.0.10 tcp dport 80 dnat to {ip2}:8080\n }}\n}}\n")
            await asyncio.to_thread(subprocess.run, ["ip", "netns", "exec", one.netns, "nft", "-f", "-"],
                                    input=rules, text=True, check=True)
            assert await _ask(one.netns_path, "10.201.0.10", 80) == f"hello from {one.address}"
        finally:
            server.close()
        registry = await _echo_server(plan.netns_path, "10.255.0.2", 5000)
        try:
            assert await _ask(two.netns_path, "10.255.0.2", 5000, "reg") == f"reg from {two.address}"
            assert await _ask(p2, "10.255.0.2", 5000, "reg") == f"reg from {ip2}"
        finally:
            registry.close()
        assert _host_view() == before
    finally:
        fabric.teardown(plan)
    assert not [n for n in netns.names() if plan.owns(n)]


async def test_the_speaker_moves_a_clusters_edge_addresses_to_the_node_of_their_pod(tmp_path: Path) -> None:
    """`up --nodes 2`: the pool manager scheduled on node 2 gets the edge addresses there (and node 1
    loses them); the fabric and a pod on node 1 reach it on node 2; moved back, node 1 again."""
    from isthmus.local.network.speaker import EdgeSpeaker

    _need()
    before = _host_view()
    plan = fabric_plan("/unused", 1, cs=_cs("s"), nodes=2)
    try:
        fabric.ensure(plan)
        one, two = plan.node("c1", 1), plan.node("c1", 2)
        speaker = EdgeSpeaker(plan, "c1", tmp_path / "unused-kubeconfig")

        def pool(host: str) -> dict[str, object]:
            return {"metadata": {"name": "pools", "labels": {"app.kubernetes.io/name": "isthmus-pools"},
                                 "creationTimestamp": "2026-12-07T10:00:00Z"},
                    "status": {"hostIP": host, "conditions": [{"type": "Ready", "status": "False"}]}}

        await speaker.apply([], force=True)  # as up starts it: node 1 holds them
        net = cni.PodNetwork(one.netns, one.pod_cidr, one.pod_gateway, tmp_path / "one")
        p1, ip1 = await net.attach(one.pod_netns("33333333-cccc"), "sandbox-c")
        for holder in (two, one):
            await speaker.apply([pool(holder.address)])
            server = await _echo_server(holder.netns_path, holder.edge_public, 9000)
            try:
                assert await _ask(plan.netns_path, holder.edge_public, 9000, "edge") == f"edge from {holder.fabric_gateway}"
                assert await _ask(p1, holder.edge_public, 9000, "edge") == f"edge from {ip1}"
            finally:
                server.close()
            other = two if holder is one else one
            addrs = (await asyncio.to_thread(subprocess.run, ["ip", "-n", other.netns, "-br", "addr", "show", "dev",
                                                              "edge0"], capture_output=True, text=True, check=True)).stdout
            assert holder.edge_public not in addrs, addrs
        assert _host_view() == before
    finally:
        fabric.teardown(plan)
    assert not [n for n in netns.names() if plan.owns(n)]


@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "10.255.0.1:80"], "error: --listen '10.255.0.1:80': expected LISTEN_ADDR:PORT=TARGET_ADDR:PORT"),
    (["--publish", "127.0.0.1:80=registry:5000"], "error: --publish '127.0.0.1:80=registry:5000': 'registry' is "
                                                  "not an IP address"),
    ([], "error: give at least one --listen or --publish"),
])
def test_netrelay_refuses_a_malformed_door(args: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "isthmus", "netrelay", "--netns", "isthmus-t-none", *args],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                          timeout=30)
    assert (done.returncode, done.stderr) == (2, message + "\n")
