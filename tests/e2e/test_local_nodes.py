"""`isthmus up --runtime runc --clusters 1 --nodes 2` as a user meets it: two Ready Nodes, each with
its own /24 of the cluster's pod CIDR; a two-replica Deployment with anti-affinity (agnhost netexec)
runs one pod per node, and a pod on each node reaches the other by its pod IP and through the
Service's ClusterIP.

Needs what runc mode needs (root, runc, iproute2, nftables, skopeo, umoci, docker-registry,
mmdebstrap, the CNI plugins): `up` fails, naming what is missing, without them. Always brought down.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.local import Clusterset, wait_for

# clusterset: one local clusterset at a time (it takes the machine); run serially.
pytestmark = [pytest.mark.e2e, pytest.mark.clusterset, pytest.mark.timeout(900)]

WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {isthmus.io/workload: echo}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: web
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        imagePullPolicy: IfNotPresent
        args: ["netexec", "--http-port=8080", "--udp-port=0"]
        ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"""
GET = "import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1], timeout=5))['pod'])"
"""The client, in the same image (Debian's python3): which pod answered (netexec's JSON)."""


@pytest.fixture(scope="module")
def cs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusterset]:
    cs = Clusterset(tmp_path_factory.mktemp("local-nodes") / "state")
    try:
        cs.isthmus("up", "--detach", "--state-dir", str(cs.root), "--runtime", "runc", "--clusters", "1",
                   "--nodes", "2", timeout=840)
        yield cs
    finally:
        cs.isthmus("down", "--state-dir", str(cs.root), check=False, timeout=180)


def _ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])


def test_two_ready_nodes_with_their_own_pod_cidrs(cs: Clusterset) -> None:
    nodes = json.loads(cs.kubectl("c1", "get", "nodes", "-o", "json"))["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["c1-node", "c1-node-2"]
    assert all(_ready(n) for n in nodes)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert by_name["c1-node"]["spec"]["podCIDR"] == "10.101.0.0/24"
    assert by_name["c1-node-2"]["spec"]["podCIDR"] == "10.101.1.0/24"
    addresses = {name: next(a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP")
                 for name, n in by_name.items()}
    assert addresses == {"c1-node": "10.255.0.11", "c1-node-2": "10.255.1.11"}
    status = cs.status()
    assert [(n["name"], n["health"]) for n in status["clusters"][0]["nodes"]] == [
        ("c1-node", "ready"), ("c1-node-2", "ready")]
    table = cs.isthmus("status", "--state-dir", str(cs.root)).stdout
    assert "c1-node-2" in table and "10.101.1.0/24" in table


def test_a_pod_on_each_node_reaches_the_other(cs: Clusterset, tmp_path: Path) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(WEB)
    cs.kubectl("c1", "apply", "-f", str(manifest))

    def running() -> list[dict[str, Any]] | None:
        pods = json.loads(cs.kubectl("c1", "get", "pods", "-n", "default", "-l", "app=web", "-o", "json"))["items"]
        up = [p for p in pods if _ready(p) and p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")]
        return up if len(up) == 2 else None

    pods = wait_for("both web pods ready", running, timeout=300)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["c1-node", "c1-node-2"]
    for p in pods:
        slice_ = "10.101.0." if p["spec"]["nodeName"] == "c1-node" else "10.101.1."
        assert p["status"]["podIP"].startswith(slice_), p["status"]["podIP"]
    for me, other in ((pods[0], pods[1]), (pods[1], pods[0])):
        # Ready without a readiness probe means started, not listening yet: ask until it answers
        def by_pod_ip(me: dict[str, Any] = me, other: dict[str, Any] = other) -> bool:
            got = cs.kubectl("c1", "exec", "-n", "default", me["metadata"]["name"], "--",
                             "python3", "-c", GET, f"http://{other['status']['podIP']}:8080/", check=False)
            return bool(got.strip() == other["metadata"]["name"])

        wait_for(f"{me['spec']['nodeName']}'s pod to reach {other['metadata']['name']} at {other['status']['podIP']}",
                 by_pod_ip, timeout=60)
    cluster_ip = json.loads(cs.kubectl("c1", "get", "svc", "web", "-n", "default", "-o", "json"))["spec"]["clusterIP"]
    for me in pods:  # through the ClusterIP (each node's own proxy), until the other node's pod answers
        want = next(p["metadata"]["name"] for p in pods if p is not me)

        def through_service(me: dict[str, Any] = me, want: str = want) -> bool:
            got = cs.kubectl("c1", "exec", "-n", "default", me["metadata"]["name"], "--",
                             "python3", "-c", GET, f"http://{cluster_ip}/", check=False)
            return got.strip() == want

        wait_for(f"{me['spec']['nodeName']}'s pod to reach {want} through {cluster_ip}", through_service,
                 timeout=60)


def test_draining_the_pool_managers_node_moves_the_edge_addresses_with_it(cs: Clusterset) -> None:
    """The edge speaker: the pool manager evicted by `kubectl drain` starts on the other node, and the
    cluster's edge addresses (on that node's edge0) and the fabric's routes to them follow it."""
    import subprocess

    from isthmus.local.network.plan import fabric_plan

    fp = fabric_plan(cs.root, 1, nodes=2)
    by_name = {n.name: n for n in fp.nodes if n.cluster == "c1"}

    def ready_pools() -> list[dict[str, Any]]:
        pods = json.loads(cs.kubectl("c1", "get", "pods", "-A", "-l", "app.kubernetes.io/name=isthmus-pools",
                                     "-o", "json"))["items"]
        return [p for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp")]

    def holds(node_name: str) -> bool:
        node = by_name[node_name]
        addrs = subprocess.run(["ip", "-n", node.netns, "-br", "addr", "show", "dev", "edge0"], capture_output=True,
                               text=True, timeout=10, check=True).stdout
        route = subprocess.run(["ip", "-n", fp.netns, "route", "show", "10.30.1.0/24"], capture_output=True,
                               text=True, timeout=10, check=True).stdout
        return f"{node.edge_public}/32" in addrs and f"via {node.address} " in route

    # Two pool managers here (one per node: host ports), the addresses on one of them.
    wait_for("a pool manager ready on each node", lambda: len({p["spec"]["nodeName"] for p in ready_pools()}) == 2,
             timeout=120)
    here = wait_for("the edge addresses on one node", lambda: next((n for n in by_name if holds(n)), None), timeout=30)
    there = next(n for n in by_name if n != here)
    cs.kubectl("c1", "drain", here, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s")
    try:
        wait_for(f"the edge addresses and the fabric's route on {there}, where the other pool manager serves",
                 lambda: holds(there), timeout=30)
        assert not holds(here)
        assert {p["spec"]["nodeName"] for p in ready_pools()} == {there}
    finally:
        cs.kubectl("c1", "uncordon", here)
