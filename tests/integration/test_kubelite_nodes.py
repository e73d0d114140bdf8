"""Two kube-lites of one cluster (`isthmus up --nodes 2` in process mode): each the kubelet of its
own Node, with addresses from its own slice of the cluster's pod CIDR; node 1 also runs the
cluster-wide controllers and is the service proxy of the shared host network.

Every address is loopback (a random 127.x.y.0/24 cluster pod CIDR cut in two /25s).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod, Service

from isthmus.kube.helpers import install_crds
from isthmus.local.kubelite import WORKLOAD_ANNOTATION, KubeLite
from isthmus.proxy import ProxyConfig, ProxyService
from tests.harness.kubelite import NODE_PORTS, NS, create, echo_deployment, pods_of
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(120)

CLUSTER = "c7"


class Node2:
    """A kube-lite for one node of a two-node cluster, restartable."""

    def __init__(self, client: AsyncClient, *, pod_cidr: str, service_cidr: str, node: str, slice_: str,
                 controllers: bool) -> None:
        self.client, self.node, self.slice, self.controllers = client, node, slice_, controllers
        self.pod_cidr, self.service_cidr = pod_cidr, service_cidr
        self.task: asyncio.Task[None] | None = None
        self.lite: KubeLite | None = None

    async def start(self) -> None:
        self.lite = KubeLite(self.client, cluster=CLUSTER, pod_cidr=self.pod_cidr, service_cidr=self.service_cidr,
                             node_ports=NODE_PORTS, node=self.node, node_pod_cidr=self.slice,
                             controllers=self.controllers)
        ready = asyncio.Event()
        self.task = asyncio.create_task(self.lite.run(ready))
        async with asyncio.timeout(15):
            await ready.wait()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                async with asyncio.timeout(15):
                    await self.task
            self.task = None


@pytest.fixture
async def nodes(apiserver: Any) -> AsyncIterator[tuple[Node2, Node2]]:
    a, b = random.randint(100, 199), random.randint(0, 255)
    pod_cidr, service_cidr = f"127.{a}.{b}.0/24", f"127.{a + 50}.{b}.0/24"
    halves = [str(n) for n in ipaddress.IPv4Network(pod_cidr).subnets(new_prefix=25)]
    one = Node2(apiserver.client(), pod_cidr=pod_cidr, service_cidr=service_cidr, node=f"{CLUSTER}-node",
                slice_=halves[0], controllers=True)
    two = Node2(apiserver.client(), pod_cidr=pod_cidr, service_cidr=service_cidr, node=f"{CLUSTER}-node-2",
                slice_=halves[1], controllers=False)
    await one.start()
    await two.start()
    try:
        yield one, two
    finally:
        await two.stop()
        await one.stop()


def echo_pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "echo", "image": "echo", "ports": [{"containerPort": 8080}]}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}, "annotations": {WORKLOAD_ANNOTATION: "echo"}},
            "spec": spec}


async def running(client: AsyncClient, name: str) -> dict[str, Any] | None:
    pod = (await client.get(Pod, name, namespace=NS)).to_dict()
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])
    return pod if ready and (pod.get("status") or {}).get("podIP") else None


async def ask(host: str, port: int) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n")
        raw = await reader.read()
    finally:
        writer.close()
    return dict(json.loads(raw.split(b"\r\n\r\n", 1)[1]))


async def test_each_node_registers_with_its_pod_cidr_slice(nodes: tuple[Node2, Node2]) -> None:
    one, two = nodes
    c = one.client
    n1 = (await c.get(Node, one.node)).to_dict()
    n2 = (await c.get(Node, two.node)).to_dict()
    assert n1["spec"]["podCIDR"] == one.slice and n1["spec"]["podCIDRs"] == [one.slice]
    assert n2["spec"]["podCIDR"] == two.slice and n2["spec"]["podCIDRs"] == [two.slice]
    ready = [next(x["status"] for x in n["status"]["conditions"] if x["type"] == "Ready") for n in (n1, n2)]
    assert ready == ["True", "True"]
    # the controllers' node carries the control-plane role; the other is a worker
    assert "node-role.kubernetes.io/control-plane" in n1["metadata"]["labels"]
    assert "node-role.kubernetes.io/control-plane" not in n2["metadata"]["labels"]


async def test_pods_run_on_their_node_with_its_addresses_and_reach_through_node_1s_proxy(
    nodes: tuple[Node2, Node2],
) -> None:
    one, two = nodes
    c = one.client
    async with asyncio.timeout(30):
        await install_crds(c)  # the proxy lists ServiceImports too
    await create(c, Pod, echo_pod("on-one", one.node))
    await create(c, Pod, echo_pod("on-two", two.node))
    p1 = await eventually(lambda: running(c, "on-one"), what="pod on node 1 running")
    p2 = await eventually(lambda: running(c, "on-two"), what="pod on node 2 running")
    assert p1 is not None and p2 is not None
    assert ipaddress.ip_address(p1["status"]["podIP"]) in ipaddress.ip_network(one.slice)
    assert ipaddress.ip_address(p2["status"]["podIP"]) in ipaddress.ip_network(two.slice)
    # node 2's kubelet runs it, not node 1's
    assert two.lite is not None and one.lite is not None
    assert f"{NS}/on-two" in two.lite.pods.servers and f"{NS}/on-two" not in one.lite.pods.servers
    assert f"{NS}/on-one" in one.lite.pods.servers and f"{NS}/on-one" not in two.lite.pods.servers
    assert (await ask(p2["status"]["podIP"], 8080))["pod"] == "on-two"

    # a Service (its ClusterIP from node 1's controllers) reaches the pod on node 2 via node 1's proxy
    await create(c, Service, {"metadata": {"name": "on-two"},
                              "spec": {"selector": {"app": "on-two"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    proxy = ProxyService(c, ProxyConfig(cluster_id=CLUSTER, node_address=None, bind_backoff_base=0.05))
    await proxy.start()
    try:
        assert await proxy.wait_ready(20)

        async def through_cluster_ip() -> dict[str, Any] | None:
            svc = (await c.get(Service, "on-two", namespace=NS)).to_dict()
            ip = (svc.get("spec") or {}).get("clusterIP")
            if not ip:
                return None
            with contextlib.suppress(OSError, ValueError, IndexError):
                return await ask(ip, 80)
            return None

        answer = await eventually(through_cluster_ip, what="the ClusterIP answers")
        assert answer is not None and answer["pod"] == "on-two"
    finally:
        await proxy.stop()


async def test_a_restarted_node_keeps_its_pods_addresses(nodes: tuple[Node2, Node2]) -> None:
    one, two = nodes
    c = one.client
    await create(c, Pod, echo_pod("stays", two.node))
    before = await eventually(lambda: running(c, "stays"), what="pod on node 2 running")
    assert before is not None
    await two.stop()
    await create(c, Pod, echo_pod("meanwhile", two.node))  # waits for its kubelet
    await two.start()
    after = await eventually(lambda: running(c, "stays"), what="pod running again")
    other = await eventually(lambda: running(c, "meanwhile"), what="the new pod running")
    assert after is not None and other is not None
    assert after["status"]["podIP"] == before["status"]["podIP"]
    assert other["status"]["podIP"] != before["status"]["podIP"]
    assert ipaddress.ip_address(other["status"]["podIP"]) in ipaddress.ip_network(two.slice)
    assert (await ask(after["status"]["podIP"], 8080))["pod"] == "stays"


async def test_a_deployment_with_anti_affinity_runs_one_pod_per_node(nodes: tuple[Node2, Node2]) -> None:
    """The scheduler (node 1's) binds; each node's kubelet runs its own with an address of its slice."""
    one, two = nodes
    c = one.client
    deployment = echo_deployment("spread", 2)
    template = deployment["spec"]["template"]["spec"]
    template["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    await create(c, Deployment, deployment)

    async def both_running() -> list[dict[str, Any]] | None:
        pods = [p for p in await pods_of(c, {"app": "spread"}) if not p["metadata"].get("deletionTimestamp")]
        up = [fresh for p in pods if (fresh := await running(c, p["metadata"]["name"])) is not None]
        return up if len(up) == 2 else None  # the fresh Pods: the listed ones may predate their podIP

    pods = await eventually(both_running, what="both replicas running")
    by_node = {p["spec"]["nodeName"]: p["status"]["podIP"] for p in pods}
    assert set(by_node) == {one.node, two.node}
    assert ipaddress.ip_address(by_node[one.node]) in ipaddress.ip_network(one.slice)
    assert ipaddress.ip_address(by_node[two.node]) in ipaddress.ip_network(two.slice)
    names = {p["metadata"]["name"] for p in pods}

    async def scheduled() -> list[dict[str, Any]] | None:
        events = [e.to_dict() async for e in c.list(Event, namespace=NS)]
        found = [e for e in events if e.get("reason") == "Scheduled"
                 and (e.get("involvedObject") or {}).get("name") in names]
        return found if len(found) == 2 else None

    for e in await eventually(scheduled, what="a Scheduled Event per pod"):
        assert e["message"].startswith(f"Successfully assigned {NS}/")
