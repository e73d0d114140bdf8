"""The node lifecycle controller against an in-process apiserver: a Node whose kubelet falls
silent (its Lease and status stop moving) turns Unknown and is tainted unreachable, its Pods are
marked not ready and evicted when their toleration runs out; cordon taints it unschedulable."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod
from lightkube.types import PatchType

from isthmus.local.kubelite.nodelifecycle import NodeLifecycleController, PodGCController
from isthmus.runtime import EventRecorder, SharedInformerFactory
from tests.harness.kubelite import kubectl
from tests.harness.polling import eventually

pytestmark = [pytest.mark.timeout(120)]

NS = "default"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def beat(client: AsyncClient, name: str) -> None:
    """What a kubelet posts: Ready, and its Lease renewed."""
    await client.patch(Node.Status, name, {"status": {"conditions": [
        {"type": t, "status": s, "reason": "Kubelet", "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}
        for t, s in (("Ready", "True"), ("MemoryPressure", "False"), ("DiskPressure", "False"),
                     ("PIDPressure", "False"))]}}, patch_type=PatchType.MERGE)
    renew = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        await client.patch(Lease, name, {"spec": {"renewTime": renew}}, namespace="kube-node-lease",
                           patch_type=PatchType.MERGE)
    except ApiError:
        await client.create(cast(Lease, Lease.from_dict({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew}})))


async def bound_pod(client: AsyncClient, name: str, tolerations: list[dict[str, Any]] | None = None) -> None:
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}
    if tolerations:
        spec["tolerations"] = tolerations
    await client.create(cast(Pod, Pod.from_dict({"apiVersion": "v1", "kind": "Pod",
                                                 "metadata": {"name": name, "namespace": NS}, "spec": spec})))
    await client.patch(Pod.Status, name, {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": _now()}]}}, namespace=NS,
        patch_type=PatchType.MERGE)


@pytest.fixture
async def cluster(apiserver: Any) -> AsyncIterator[AsyncClient]:
    assert shutil.which("kubectl"), "kubectl is needed (the Makefile installs it)"
    client = apiserver.client()
    with contextlib.suppress(ApiError):
        await client.create(Namespace.from_dict({"metadata": {"name": "kube-node-lease"}}))
    await client.create(cast(Node, Node.from_dict({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})))
    await beat(client, "n1")
    factory = SharedInformerFactory(client)
    controller = NodeLifecycleController(
        client, factory.informer(Node), factory.informer(Lease), factory.informer(Pod),
        EventRecorder(client, "kube-lite"), grace=2.0, monitor=0.2,
    )
    factory.start()
    await factory.wait_synced()
    task = asyncio.create_task(controller.run())
    try:
        yield client
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await factory.stop()


async def taints(client: AsyncClient) -> list[tuple[str, str]]:
    spec = (await client.get(Node, "n1")).to_dict().get("spec") or {}
    return [(t["key"], t["effect"]) for t in spec.get("taints") or []]


async def test_silent_node_is_unknown_tainted_and_drained(cluster: AsyncClient) -> None:
    await bound_pod(cluster, "long")  # DefaultTolerationSeconds: 300 s
    await bound_pod(cluster, "short", [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                        "effect": "NoExecute", "tolerationSeconds": 1}])
    for _ in range(3):  # a live kubelet: nothing happens
        await beat(cluster, "n1")
        await asyncio.sleep(1)
    assert await taints(cluster) == []

    async def unreachable() -> list[tuple[str, str]] | None:  # the kubelet is gone from here on
        found = await taints(cluster)
        return found if len(found) == 2 else None

    assert await eventually(unreachable, what="unreachable taints") == [
        ("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")]
    node = (await cluster.get(Node, "n1")).to_dict()
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    long = (await cluster.get(Pod, "long", namespace=NS)).to_dict()
    assert next(c for c in long["status"]["conditions"] if c["type"] == "Ready")["status"] == "False"

    async def short_gone() -> bool:
        try:
            pod = (await cluster.get(Pod, "short", namespace=NS)).to_dict()
        except ApiError:
            return True
        return bool(pod["metadata"].get("deletionTimestamp"))

    await eventually(short_gone, what="short evicted")
    assert not (await cluster.get(Pod, "long", namespace=NS)).to_dict()["metadata"].get("deletionTimestamp")
    async def recorded() -> bool:  # the recorder writes in the background
        events = [e.to_dict() async for e in cluster.list(Event, namespace=NS)]
        reasons = {(e["reason"], e["involvedObject"]["name"], e["source"]["component"]) for e in events}
        return {("NodeNotReady", "long", "node-controller"),
                ("TaintManagerEviction", "short", "node-controller")} <= reasons

    await eventually(recorded, what="NodeNotReady and TaintManagerEviction events")

    await beat(cluster, "n1")  # back: the taints go
    assert await eventually(lambda: _no_taints(cluster), what="taints removed")


async def _no_taints(client: AsyncClient) -> bool:
    return await taints(client) == []


async def test_cordon_taints_unschedulable(cluster: AsyncClient, apiserver: Any) -> None:
    async def kubelet() -> None:
        while True:
            await beat(cluster, "n1")
            await asyncio.sleep(0.5)

    alive = asyncio.create_task(kubelet())
    try:
        code, out = await kubectl(apiserver.kubeconfig, "cordon", "n1")
        assert code == 0, out

        async def cordoned() -> list[tuple[str, str]] | None:
            found = await taints(cluster)
            return found if found else None

        assert await eventually(cordoned, what="unschedulable taint") == [
            ("node.kubernetes.io/unschedulable", "NoSchedule")]
        code, out = await kubectl(apiserver.kubeconfig, "uncordon", "n1")
        assert code == 0, out
        await eventually(lambda: _no_taints(cluster), what="taint removed")
        await asyncio.sleep(3)  # longer than the grace: a kubelet that beats keeps its Node untainted
        assert await taints(cluster) == []
    finally:
        alive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await alive


async def test_pods_of_a_deleted_node_are_collected(apiserver: Any) -> None:
    client = apiserver.client()
    await client.create(cast(Node, Node.from_dict({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n9"}})))
    await client.create(cast(Pod, Pod.from_dict({"apiVersion": "v1", "kind": "Pod",
                                                 "metadata": {"name": "left", "namespace": NS},
                                                 "spec": {"nodeName": "n9",
                                                          "containers": [{"name": "c", "image": "busybox"}]}})))
    factory = SharedInformerFactory(client)
    now = [1000.0]
    gc = PodGCController(client, factory.informer(Node), factory.informer(Pod), clock=lambda: now[0])
    factory.start()
    try:
        await factory.wait_synced()
        assert await gc.collect() == []
        await client.delete(Node, "n9")
        await eventually(lambda: not gc.nodes.cache.list(), what="node gone from the cache")
        assert await gc.collect() == []  # quarantined
        now[0] += 41
        assert await gc.collect() == [f"{NS}/left"]
        with pytest.raises(ApiError):
            await client.get(Pod, "left", namespace=NS)
    finally:
        await factory.stop()
