"""kube-lite's scheduler against an in-process apiserver: three Nodes made directly (no kubelet),
Pods placed through the Binding subresource, and what `kubectl` shows of it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.scheduling_v1 import PriorityClass
from lightkube.types import PatchType

from isthmus.local.kubelite.scheduler import Scheduler
from isthmus.runtime import EventRecorder, SharedInformerFactory
from tests.harness.kubelite import kubectl
from tests.harness.polling import eventually

pytestmark = [pytest.mark.timeout(120)]

NS = "default"
ZONE = "topology.kubernetes.io/zone"
NODES = {"n1": "a", "n2": "a", "n3": "b"}


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    assert shutil.which("kubectl"), "kubectl is needed (the Makefile installs it)"


async def make_node(client: AsyncClient, name: str, zone: str) -> None:
    await client.create(cast(Node, Node.from_dict({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, ZONE: zone}},
    })))
    await client.patch(Node.Status, name, {"status": {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }}, patch_type=PatchType.MERGE)


@pytest.fixture
async def cluster(apiserver: Any) -> AsyncIterator[AsyncClient]:
    client = apiserver.client()
    for name, zone in NODES.items():
        await make_node(client, name, zone)
    factory = SharedInformerFactory(client)
    scheduler = Scheduler(client, factory.informer(Pod), factory.informer(Node), EventRecorder(client, "kube-lite"))
    factory.start()
    await factory.wait_synced()
    task = asyncio.create_task(scheduler.run())
    try:
        yield client
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await factory.stop()


def web_pod(name: str, app: str = "web", **spec: Any) -> Pod:
    return cast(Pod, Pod.from_dict({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }))


async def placed(client: AsyncClient, names: list[str]) -> dict[str, str]:
    async def all_bound() -> dict[str, str] | None:
        out = {}
        for n in names:
            spec = (await client.get(Pod, n, namespace=NS)).to_dict().get("spec") or {}
            if not spec.get("nodeName"):
                return None
            out[n] = spec["nodeName"]
        return out

    return cast(dict[str, str], await eventually(all_bound, what=f"{names} bound"))


async def condition(client: AsyncClient, name: str) -> dict[str, Any]:
    async def unschedulable() -> dict[str, Any] | None:
        pod = (await client.get(Pod, name, namespace=NS)).to_dict()
        return next((c for c in (pod.get("status") or {}).get("conditions") or []
                     if c["type"] == "PodScheduled" and c["status"] == "False"), None)

    return cast(dict[str, Any], await eventually(unschedulable, what=f"{name} unschedulable"))


async def events_of(client: AsyncClient, reason: str, name: str) -> list[dict[str, Any]] | None:
    """The Events of this reason about this Pod (the recorder writes them in the background)."""
    found = [e.to_dict() async for e in client.list(Event, namespace=NS)]
    found = [e for e in found if e["reason"] == reason and e["involvedObject"]["name"] == name]
    return found or None


ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}


async def test_anti_affinity_spreads_and_the_fourth_is_unschedulable(cluster: AsyncClient, apiserver: Any) -> None:
    for i in range(3):
        await cluster.create(web_pod(f"web-{i}", affinity=ANTI))
    where = await placed(cluster, [f"web-{i}" for i in range(3)])
    assert sorted(where.values()) == ["n1", "n2", "n3"]

    await cluster.create(web_pod("web-3", affinity=ANTI))
    cond = await condition(cluster, "web-3")
    message = ("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. "
               "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.")
    assert cond["reason"] == "Unschedulable" and cond["message"] == message

    async def described() -> str | None:
        code, out = await kubectl(apiserver.kubeconfig, "describe", "pod", "web-3", "-n", NS)
        return out if code == 0 and "FailedScheduling" in out else None

    out = await eventually(described, what="FailedScheduling in describe")
    line = next(ln for ln in out.splitlines() if "FailedScheduling" in ln)
    assert line.split()[:2] == ["Warning", "FailedScheduling"] and "default-scheduler" in line
    assert "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules." in line
    assert "PodScheduled" in out and "False" in next(ln for ln in out.splitlines() if "PodScheduled" in ln)

    # One replica gone: the pending one is placed where it was (retried on the Pod event).
    gone = where["web-1"]
    await cluster.delete(Pod, "web-1", namespace=NS, grace_period=0)
    assert (await placed(cluster, ["web-3"]))["web-3"] == gone

    scheduled = await eventually(lambda: events_of(cluster, "Scheduled", "web-0"), what="Scheduled event")
    assert scheduled[0]["message"] == f"Successfully assigned {NS}/web-0 to {where['web-0']}"
    assert scheduled[0]["source"]["component"] == "default-scheduler"
    assert scheduled[0]["involvedObject"]["kind"] == "Pod" and scheduled[0]["involvedObject"]["apiVersion"] == "v1"


async def test_cordoned_and_tainted_nodes(cluster: AsyncClient, apiserver: Any) -> None:
    code, out = await kubectl(apiserver.kubeconfig, "cordon", "n3")
    assert code == 0, out
    code, out = await kubectl(apiserver.kubeconfig, "taint", "node", "n2", "dedicated=infra:NoSchedule")
    assert code == 0, out
    names = [f"p-{i}" for i in range(5)]
    for n in names:
        await cluster.create(web_pod(n, app=n))
    assert set((await placed(cluster, names)).values()) == {"n1"}

    tolerant = web_pod("infra", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infra",
                                              "effect": "NoSchedule"}], nodeSelector={"kubernetes.io/hostname": "n2"})
    await cluster.create(tolerant)
    assert (await placed(cluster, ["infra"]))["infra"] == "n2"

    await cluster.create(web_pod("stuck", nodeSelector={"kubernetes.io/hostname": "n3"}))
    cond = await condition(cluster, "stuck")
    assert cond["message"] == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: infra}, 1 node(s) were unschedulable. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    code, out = await kubectl(apiserver.kubeconfig, "uncordon", "n3")
    assert code == 0, out
    assert (await placed(cluster, ["stuck"]))["stuck"] == "n3"  # retried when the Node changed


async def test_topology_spread_over_zones(cluster: AsyncClient) -> None:
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    names = [f"web-{i}" for i in range(4)]
    for n in names:  # one at a time, as a ReplicaSet's Pods arrive
        await cluster.create(web_pod(n, topologySpreadConstraints=spread))
        await placed(cluster, [n])
    where = await placed(cluster, names)
    zones = [NODES[n] for n in where.values()]
    assert sorted(zones) == ["a", "a", "b", "b"]


async def test_preemption_makes_room_for_a_higher_priority_pod(cluster: AsyncClient) -> None:
    for name, value in (("low", 10), ("high", 1000)):
        await cluster.create(cast(PriorityClass, PriorityClass.from_dict({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value})))
    fillers = [f"batch-{i}" for i in range(3)]
    for n in fillers:  # each fills a Node's 4 CPUs
        await cluster.create(web_pod(n, app="batch", priorityClassName="low",
                                     containers=[{"name": "c", "image": "busybox",
                                                  "resources": {"requests": {"cpu": "4"}}}]))
    where = await placed(cluster, fillers)
    await cluster.create(web_pod("vip", app="vip", priorityClassName="high",
                                 containers=[{"name": "c", "image": "busybox",
                                              "resources": {"requests": {"cpu": "2"}}}]))

    async def nominated() -> str | None:
        status = (await cluster.get(Pod, "vip", namespace=NS)).to_dict().get("status") or {}
        return status.get("nominatedNodeName")

    node = await eventually(nominated, what="vip nominated")
    [victim] = [n for n, on in where.items() if on == node]
    dying = (await cluster.get(Pod, victim, namespace=NS)).to_dict()
    assert dying["metadata"].get("deletionTimestamp")  # deleted with its grace period
    target = next(c for c in dying["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
    cond = await condition(cluster, "vip")
    assert cond["message"].startswith("0/3 nodes are available: 3 Insufficient cpu.")

    # The kubelet would finish the deletion; the Pod then goes to the Node it was nominated for.
    await cluster.delete(Pod, victim, namespace=NS, grace_period=0)
    assert (await placed(cluster, ["vip"]))["vip"] == node
    for n in fillers:  # one victim only
        if n != victim:
            assert not (await cluster.get(Pod, n, namespace=NS)).to_dict()["metadata"].get("deletionTimestamp")
    uid = (await cluster.get(Pod, "vip", namespace=NS)).to_dict()["metadata"]["uid"]
    preempted = await eventually(lambda: events_of(cluster, "Preempted", victim), what="Preempted event")
    assert preempted[0]["message"] == f"Preempted by pod {uid} on node {node}"
