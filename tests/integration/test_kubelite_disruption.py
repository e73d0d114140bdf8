"""PodDisruptionBudget status from kube-lite's disruption controller against an in-process
apiserver, read as `kubectl get pdb` and the API show it on a real cluster."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment, ReplicaSet, StatefulSet
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from isthmus.local.kubelite.disruption import DisruptionController
from isthmus.local.kubelite.workloads import DeploymentController, ReplicaSetController
from isthmus.runtime import EventRecorder, SharedInformerFactory
from tests.harness.kubelite import NS, create, kubectl
from tests.harness.polling import eventually
from tests.integration.test_kubelite_deployment_rollout import Kubelet, gateway

pytestmark = [pytest.mark.timeout(90)]


@pytest.fixture
async def client(apiserver: Any) -> AsyncIterator[AsyncClient]:
    client = apiserver.client()
    factory = SharedInformerFactory(client)
    pods, replicasets, deployments = factory.informer(Pod), factory.informer(ReplicaSet), factory.informer(Deployment)
    recorder = EventRecorder(client, "kube-lite")
    runners = [
        DeploymentController(client, deployments, replicasets, pods).run,
        ReplicaSetController(client, replicasets, pods).run,
        DisruptionController(client, factory.informer(PodDisruptionBudget), pods, deployments, replicasets,
                             factory.informer(StatefulSet), recorder=recorder).run,
        Kubelet(client).run,
    ]
    factory.start()
    await factory.wait_synced()
    tasks = [asyncio.create_task(r()) for r in runners]
    try:
        yield client
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await factory.stop()
        await recorder.aclose()


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}


async def status_of(client: AsyncClient, name: str) -> dict[str, Any]:
    return (await client.get(PodDisruptionBudget, name, namespace=NS)).to_dict().get("status") or {}


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_budget_status_follows_pods_and_evictions(apiserver: Any, client: AsyncClient) -> None:
    await create(client, Deployment, gateway("web", 3))
    await create(client, PodDisruptionBudget, budget("min2", minAvailable=2))
    await create(client, PodDisruptionBudget, budget("half", maxUnavailable="50%"))

    async def counted(name: str, healthy: int) -> dict[str, Any] | None:
        st = await status_of(client, name)
        return st if st.get("currentHealthy") == healthy else None

    st = await eventually(lambda: counted("min2", 3), what="3 healthy pods counted")
    assert (st["expectedPods"], st["desiredHealthy"], st["disruptionsAllowed"], st["observedGeneration"]) == (3, 2, 1, 1)
    (cond,) = st["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionAllowed", "True", "SufficientPods")
    half = await eventually(lambda: counted("half", 3), what="the percentage budget")
    assert (half["expectedPods"], half["desiredHealthy"], half["disruptionsAllowed"]) == (3, 1, 2)  # 3 - ceil(1.5)
    code, out = await kubectl(apiserver.kubeconfig, "-n", NS, "get", "pdb", "min2", "--no-headers")
    assert code == 0 and out.split()[:4] == ["min2", "2", "N/A", "1"], out

    # An eviction (the Eviction subresource's write) takes a Pod out of the healthy count until it
    # is deleted, for at most 2 minutes; an entry older than that is dropped with kube's warning.
    pods = sorted([str(p.to_dict()["metadata"]["name"]) async for p in client.list(Pod, namespace=NS)])
    now = datetime.now(UTC)
    await client.patch(PodDisruptionBudget.Status, "min2", {"status": {"disruptedPods": {
        pods[0]: stamp(now), pods[1]: stamp(now - timedelta(minutes=3))}}},
        namespace=NS, patch_type=PatchType.MERGE)
    st = await eventually(lambda: counted("min2", 2), what="the evicted pod not counted")
    assert st["disruptedPods"] == {pods[0]: stamp(now)} and st["disruptionsAllowed"] == 0
    assert st["conditions"][0]["reason"] == "InsufficientPods" and st["conditions"][0]["status"] == "False"

    async def not_deleted() -> list[dict[str, Any]]:
        return [e.to_dict() async for e in client.list(Event, namespace=NS)
                if e.reason == "NotDeleted" and e.involvedObject.name == pods[1]]

    (ev,) = await eventually(not_deleted, what="the NotDeleted warning")
    assert ev["type"] == "Warning" and ev["message"] == f"Pod was expected by PDB {NS}/{NS} to be deleted but it wasn't"

    await client.delete(Pod, pods[0], namespace=NS)  # the evicted Pod goes: its entry with it

    async def entry_gone() -> bool:
        st = await status_of(client, "min2")
        return not st.get("disruptedPods") and st.get("currentHealthy") == 3

    await eventually(entry_gone, what="the entry of a deleted pod dropped, its replacement counted")

    # minAvailable as a percentage is taken of the Deployment's scale, not of the Pods there now.
    await client.patch(PodDisruptionBudget, "half", {"spec": {"maxUnavailable": None, "minAvailable": "100%"}},
                       namespace=NS, patch_type=PatchType.MERGE)
    await client.patch(Deployment, "web", {"spec": {"replicas": 4}}, namespace=NS, patch_type=PatchType.MERGE)

    async def rescaled() -> dict[str, Any] | None:
        st = await status_of(client, "half")
        return st if st.get("expectedPods") == 4 and st.get("observedGeneration") == 2 else None

    st = await eventually(rescaled, what="the budget's base follows the scale")
    assert st["desiredHealthy"] == 4


async def test_a_budget_selecting_nothing_allows_nothing(client: AsyncClient) -> None:
    await create(client, PodDisruptionBudget, {"metadata": {"name": "empty"},
                                               "spec": {"selector": {"matchLabels": {"app": "none"}},
                                                        "maxUnavailable": 1}})

    async def synced() -> dict[str, Any] | None:
        st = await status_of(client, "empty")
        return st if st.get("observedGeneration") == 1 else None

    st = await eventually(synced, what="the status written")
    assert (st["expectedPods"], st["currentHealthy"], st["desiredHealthy"], st["disruptionsAllowed"]) == (0, 0, 0, 0)
    assert st["conditions"][0]["reason"] == "InsufficientPods"

    async def no_pods() -> list[Any]:
        return [e async for e in client.list(Event, namespace=NS) if e.reason == "NoPods"]

    (ev,) = await eventually(no_pods, what="the NoPods event")
    assert ev.message == "No matching pods found" and ev.source.component == "controllermanager"


async def test_a_stale_disruption_target_goes_back_to_false(client: AsyncClient) -> None:
    """Evicted (marked) but not deleted for 2 minutes: kube's controller clears the mark."""
    await create(client, Pod, {"metadata": {"name": "marked", "labels": {"app": "other"}},
                               "spec": {"containers": [{"name": "c", "image": "i"}]}})

    async def running() -> bool:  # the stand-in kubelet has written its status (it replaces the conditions)
        pod = (await client.get(Pod, "marked", namespace=NS)).to_dict()
        return any(c["type"] == "Ready" for c in pod["status"].get("conditions") or [])

    await eventually(running, what="the pod running")
    then = stamp(datetime.now(UTC) - timedelta(minutes=3))
    await client.patch(Pod.Status, "marked", {"status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting", "lastTransitionTime": then}]}},
        namespace=NS, patch_type=PatchType.STRATEGIC)

    async def cleared() -> dict[str, Any] | None:
        pod = (await client.get(Pod, "marked", namespace=NS)).to_dict()
        cond = next((c for c in pod["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"), None)
        return cond if cond is not None and cond["status"] == "False" else None

    cond = await eventually(cleared, what="DisruptionTarget set to False")
    assert cond["reason"] == "EvictionByEvictionAPI" and cond["lastTransitionTime"] != then
