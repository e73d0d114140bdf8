"""Deployment rollouts as kube's deployment controller paces and reports them, seen through kubectl
and the API: kube-lite's Deployment and ReplicaSet controllers against an in-process apiserver, with
a stand-in kubelet in the test that binds the Pods, reports them ready by a rule of the test (all,
or only the leader) and finishes terminating Pods only when the test lets it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.core_v1 import ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.core_v1 import Binding, Event, Pod
from lightkube.types import PatchType

from isthmus.local.kubelite.workloads import DeploymentController, ReplicaSetController
from isthmus.runtime import EventRecorder, SharedInformerFactory
from tests.harness.kubelite import NS, create, kubectl
from tests.harness.polling import eventually

pytestmark = [pytest.mark.timeout(120)]

NODE = "n1"


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Kubelet:
    """Binds Pods to NODE, reports them Running and Ready per ``ready`` (a function of the live
    Pods, oldest first, and the Pod), and deletes terminating Pods (grace 0) only when ``finish``."""

    client: AsyncClient
    ready: Callable[[list[dict[str, Any]], dict[str, Any]], bool] = lambda live, pod: True
    finish: bool = True
    leader: str | None = None
    task: asyncio.Task[None] | None = field(default=None)

    def leader_only(self, live: list[dict[str, Any]], pod: dict[str, Any]) -> bool:
        """Ready while holding the lease; the lease passes to the oldest live Pod when its holder is gone."""
        names = [p["metadata"]["name"] for p in live]
        if self.leader not in names:
            self.leader = names[0] if names else None
        return bool(pod["metadata"]["name"] == self.leader)

    async def step(self) -> None:
        pods = sorted([p.to_dict() async for p in self.client.list(Pod, namespace=NS)],
                      key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        for pod in pods:
            name = pod["metadata"]["name"]
            with contextlib.suppress(ApiError):
                if not (pod.get("spec") or {}).get("nodeName"):
                    # the answer is a Status, which lightkube cannot read as a Binding: done all the same
                    with contextlib.suppress(msgspec.ValidationError):
                        await self.client.create(Binding(metadata=ObjectMeta(name=name, namespace=NS),
                                                         target=ObjectReference(kind="Node", name=NODE)))
                    continue
                if pod["metadata"].get("deletionTimestamp"):
                    if self.finish:
                        await self.client.delete(Pod, name, namespace=NS, grace_period=0)
                    continue
                ready = self.ready(live, pod)
                conds = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
                if (pod.get("status") or {}).get("phase") == "Running" and conds.get("Ready", {}).get("status") == (
                        "True" if ready else "False"):
                    continue
                status = "True" if ready else "False"
                await self.client.patch(Pod.Status, name, {"status": {
                    "phase": "Running", "podIP": "127.0.0.1",
                    "conditions": [{"type": t, "status": status, "lastTransitionTime": _stamp()}
                                   for t in ("Ready", "ContainersReady")]}},
                    namespace=NS, patch_type=PatchType.MERGE)

    async def run(self) -> None:
        while True:
            await self.step()
            await asyncio.sleep(0.1)


@dataclass
class Controllers:
    client: AsyncClient
    deployments: DeploymentController
    kubelet: Kubelet


@pytest.fixture
async def ctl(apiserver: Any) -> AsyncIterator[Controllers]:
    client = apiserver.client()
    factory = SharedInformerFactory(client)
    pods = factory.informer(Pod)
    replicasets = factory.informer(ReplicaSet)
    recorder = EventRecorder(client, "kube-lite")
    dc = DeploymentController(client, factory.informer(Deployment), replicasets, pods, recorder=recorder)
    rc = ReplicaSetController(client, replicasets, pods, recorder=recorder)
    kubelet = Kubelet(client)
    factory.start()
    await factory.wait_synced()
    tasks = [asyncio.create_task(r()) for r in (dc.run, rc.run, kubelet.run)]
    try:
        yield Controllers(client, dc, kubelet)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await factory.stop()
        await recorder.aclose()


def gateway(name: str, replicas: int, image: str = "gw:v1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "gw", "image": image}]}},
            **spec,
        },
    }


async def sets_of(client: AsyncClient) -> dict[str, dict[str, Any]]:
    return {rs.metadata.name: rs.to_dict() async for rs in client.list(ReplicaSet, namespace=NS)}  # type: ignore[union-attr,misc]


async def events_of(client: AsyncClient, kind: str, name: str) -> list[dict[str, Any]]:
    evs = [e.to_dict() async for e in client.list(Event, namespace=NS)]
    mine = [e for e in evs if e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name]
    return sorted(mine, key=lambda e: e["metadata"]["name"])  # <object>.<hex nanoseconds>: creation order


def progressing(deploy: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in deploy["status"].get("conditions") or [] if c["type"] == "Progressing")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_leader_only_ready_gateway_never_completes_and_exceeds_its_deadline(
    apiserver: Any, ctl: Controllers
) -> None:
    """Defect 4 as a real cluster shows it: 2 replicas ready only while leading, default
    RollingUpdate (1 surge, 0 unavailable). The surge Pod never becomes ready, so no old Pod may
    go; `kubectl rollout status` fails on the deadline."""
    kc, c = apiserver.kubeconfig, ctl.client
    ctl.kubelet.ready = ctl.kubelet.leader_only
    await create(c, Deployment, gateway("gw", 2, progressDeadlineSeconds=3))
    await eventually(lambda: _pods_ready(c, 1, of=2), what="the leader ready, the other not")
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/gw", "gw=gw:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/gw", "--timeout=60s")
    assert code == 1, out
    assert 'error: deployment "gw" exceeded its progress deadline' in out, out

    deploy = (await c.get(Deployment, "gw", namespace=NS)).to_dict()
    sets = await sets_of(c)
    (new,) = (n for n, rs in sets.items() if rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2")
    (old,) = (n for n in sets if n != new)
    assert (sets[old]["spec"]["replicas"], sets[new]["spec"]["replicas"]) == (2, 1)  # stalled: 1 surge, 0 down
    p = progressing(deploy)
    assert (p["status"], p["reason"], p["message"]) == (
        "False", "ProgressDeadlineExceeded", f'ReplicaSet "{new}" has timed out progressing.')
    avail = next(x for x in deploy["status"]["conditions"] if x["type"] == "Available")
    assert (avail["status"], avail["reason"]) == ("False", "MinimumReplicasUnavailable")
    st = deploy["status"]
    assert (st["replicas"], st["updatedReplicas"], st["availableReplicas"], st["unavailableReplicas"]) == (3, 1, 1, 2)

    scaling = [e["message"] for e in await events_of(c, "Deployment", "gw") if e["reason"] == "ScalingReplicaSet"]
    assert scaling == [f"Scaled up replica set {old} from 0 to 2", f"Scaled up replica set {new} from 0 to 1"]
    code, out = await kubectl(kc, "-n", NS, "describe", "deployment", "gw")
    assert code == 0 and f"Scaled up replica set {new} from 0 to 1" in out and "deployment-controller" in out, out
    assert "ProgressDeadlineExceeded" in out, out


async def _pods_ready(c: AsyncClient, ready: int, *, of: int) -> bool:
    pods = [p.to_dict() async for p in c.list(Pod, namespace=NS)]
    flags = [any(x["type"] == "Ready" and x["status"] == "True" for x in (p.get("status") or {}).get("conditions") or [])
             for p in pods if not p["metadata"].get("deletionTimestamp")]
    return len(flags) == of and sum(flags) == ready


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_rolling_update_paced_by_max_surge_with_kube_events(apiserver: Any, ctl: Controllers) -> None:
    """3 replicas, maxSurge 1 / maxUnavailable 0: the new ReplicaSet grows one at a time and an
    old Pod goes only once a new one is available; kube's Events name each step."""
    kc, c = apiserver.kubeconfig, ctl.client
    await create(c, Deployment, gateway("web", 3))
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert code == 0 and 'deployment "web" successfully rolled out' in out, out
    (old,) = await sets_of(c)
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/web", "gw=gw:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert code == 0 and 'deployment "web" successfully rolled out' in out, out
    (new,) = (n for n in await sets_of(c) if n != old)
    scaling = [e["message"] for e in await events_of(c, "Deployment", "web") if e["reason"] == "ScalingReplicaSet"]
    assert scaling == [
        f"Scaled up replica set {old} from 0 to 3",
        f"Scaled up replica set {new} from 0 to 1",
        f"Scaled down replica set {old} to 2 from 3",
        f"Scaled up replica set {new} to 2 from 1",
        f"Scaled down replica set {old} to 1 from 2",
        f"Scaled up replica set {new} to 3 from 2",
        f"Scaled down replica set {old} to 0 from 1",
    ]
    ev = (await events_of(c, "Deployment", "web"))[0]
    ref = ev["involvedObject"]
    assert (ref["apiVersion"], ref["kind"], ref["namespace"]) == ("apps/v1", "Deployment", NS) and ref["uid"]
    assert ev["source"]["component"] == "deployment-controller" and ev["reportingComponent"] == "deployment-controller"
    created = [e for e in await events_of(c, "ReplicaSet", new) if e["reason"] == "SuccessfulCreate"]
    assert len(created) == 3 and all(e["message"].startswith(f"Created pod: {new}-") for e in created)
    assert created[0]["source"]["component"] == "replicaset-controller"
    deleted = [e for e in await events_of(c, "ReplicaSet", old) if e["reason"] == "SuccessfulDelete"]
    assert len(deleted) == 3 and all(e["message"].startswith(f"Deleted pod: {old}-") for e in deleted)
    deploy = (await c.get(Deployment, "web", namespace=NS)).to_dict()
    p = progressing(deploy)
    assert (p["status"], p["reason"], p["message"]) == (
        "True", "NewReplicaSetAvailable", f'ReplicaSet "{new}" has successfully progressed.')
    assert deploy["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    code, out = await kubectl(kc, "-n", NS, "events", "--for", "deployment/web")
    assert code == 0 and f"Scaled down replica set {old} to 0 from 1" in out, out


async def test_recreate_waits_until_old_pods_are_gone(apiserver: Any, ctl: Controllers) -> None:
    """Recreate: the old ReplicaSet goes to 0 and the new one stays at 0 while an old Pod is still
    terminating; once the kubelet has finished them, the new one is created and scaled up."""
    c = ctl.client
    await create(c, Deployment, gateway("rc", 2, strategy={"type": "Recreate"}))
    await eventually(lambda: _pods_ready(c, 2, of=2), what="2 ready pods")
    ctl.kubelet.finish = False  # old Pods stay terminating
    await c.patch(Deployment, "rc", {"spec": {"template": {"spec": {"containers": [{"name": "gw", "image": "gw:v2"}]}}}},
                  namespace=NS, patch_type=PatchType.STRATEGIC)

    async def old_down_and_terminating() -> bool:
        sets = await sets_of(c)
        pods = [p.to_dict() async for p in c.list(Pod, namespace=NS)]
        return (len(sets) == 1 and next(iter(sets.values()))["status"].get("replicas", 0) == 0
                and len(pods) == 2 and all(p["metadata"].get("deletionTimestamp") for p in pods))

    await eventually(old_down_and_terminating, what="old ReplicaSet at 0, its Pods terminating")
    for _ in range(3):  # whatever the controller decides now, it decides with the old Pods still there
        await ctl.deployments.reconcile(f"{NS}/rc")
    assert len(await sets_of(c)) == 1, "a new ReplicaSet was made while old Pods were terminating"
    ctl.kubelet.finish = True

    async def rolled() -> bool:
        sets = await sets_of(c)
        news = [rs for rs in sets.values() if rs["spec"]["template"]["spec"]["containers"][0]["image"] == "gw:v2"]
        return len(news) == 1 and news[0]["spec"]["replicas"] == 2 and await _pods_ready(c, 2, of=2)

    await eventually(rolled, what="the new ReplicaSet scaled up after the old Pods were gone")
    scaling = [e["message"] for e in await events_of(c, "Deployment", "rc") if e["reason"] == "ScalingReplicaSet"]
    assert scaling[1].startswith("Scaled down replica set rc-") and scaling[1].endswith(" to 0 from 2")
    assert scaling[2].startswith("Scaled up replica set rc-") and scaling[2].endswith(" from 0 to 2")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_undo_records_revision_history_pause_and_restart(apiserver: Any, ctl: Controllers) -> None:
    kc, c = apiserver.kubeconfig, ctl.client
    await create(c, Deployment, gateway("app", 2))
    for args in (("set", "image", "deploy/app", "gw=gw:v2"), ("rollout", "undo", "deploy/app")):
        code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/app", "--timeout=60s")
        assert code == 0, out
        code, out = await kubectl(kc, "-n", NS, *args)
        assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/app", "--timeout=60s")
    assert code == 0, out
    sets = await sets_of(c)
    (first,) = (rs for rs in sets.values() if rs["spec"]["template"]["spec"]["containers"][0]["image"] == "gw:v1")
    ann = first["metadata"]["annotations"]
    assert ann["deployment.kubernetes.io/revision"] == "3"
    assert ann["deployment.kubernetes.io/revision-history"] == "1"  # what it was before the rollback
    assert ann["deployment.kubernetes.io/desired-replicas"] == "2" and ann["deployment.kubernetes.io/max-replicas"] == "3"

    # Paused: a template change makes no ReplicaSet; Progressing says so; resuming rolls it out.
    code, out = await kubectl(kc, "-n", NS, "rollout", "pause", "deploy/app")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/app", "gw=gw:v3")
    assert code == 0, out

    async def paused() -> dict[str, Any] | None:
        d = (await c.get(Deployment, "app", namespace=NS)).to_dict()
        st = d.get("status") or {}
        return d if st.get("observedGeneration") == d["metadata"]["generation"] and progressing(d)[
            "reason"] == "DeploymentPaused" else None

    d = await eventually(paused, what="Progressing DeploymentPaused")
    p = progressing(d)
    assert (p["status"], p["message"]) == ("Unknown", "Deployment is paused")
    assert len(await sets_of(c)) == 2
    code, out = await kubectl(kc, "-n", NS, "rollout", "resume", "deploy/app")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/app", "--timeout=60s")
    assert code == 0 and 'deployment "app" successfully rolled out' in out, out
    assert len(await sets_of(c)) == 3

    # rollout restart: a template annotation, so a new ReplicaSet and new Pods.
    code, out = await kubectl(kc, "-n", NS, "rollout", "restart", "deploy/app")
    assert code == 0 and "restarted" in out, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/app", "--timeout=60s")
    assert code == 0 and 'deployment "app" successfully rolled out' in out, out
    sets = await sets_of(c)
    restarted = [rs for rs in sets.values() if "kubectl.kubernetes.io/restartedAt" in (
        rs["spec"]["template"]["metadata"].get("annotations") or {})]
    assert len(restarted) == 1 and restarted[0]["spec"]["replicas"] == 2
    assert restarted[0]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "5"


async def test_min_ready_seconds_hold_availability(apiserver: Any, ctl: Controllers) -> None:
    """A Pod counts as available only minReadySeconds after it became ready: the ReplicaSet and the
    Deployment say so, and the controller comes back by itself when the time is up."""
    c = ctl.client
    await create(c, Deployment, gateway("slow", 1, minReadySeconds=2))

    async def ready_not_available() -> dict[str, Any] | None:
        d = (await c.get(Deployment, "slow", namespace=NS)).to_dict()
        st = d.get("status") or {}
        return d if st.get("readyReplicas") == 1 and not st.get("availableReplicas") else None

    await eventually(ready_not_available, what="ready but not yet available")

    async def available() -> bool:
        st = (await c.get(Deployment, "slow", namespace=NS)).to_dict().get("status") or {}
        return st.get("availableReplicas") == 1

    await eventually(available, what="available after minReadySeconds")
    (rs,) = (await sets_of(c)).values()
    assert rs["spec"]["minReadySeconds"] == 2 and rs["status"]["availableReplicas"] == 1


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_scaling_is_a_scaling_event_and_a_stale_annotation_does_not_block_rollouts(
    apiserver: Any, ctl: Controllers
) -> None:
    kc, c = apiserver.kubeconfig, ctl.client
    await create(c, Deployment, gateway("sc", 2))
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/sc", "--timeout=60s")
    assert code == 0, out
    (name,) = await sets_of(c)
    code, out = await kubectl(kc, "-n", NS, "scale", "deploy/sc", "--replicas=4")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/sc", "--timeout=60s")
    assert code == 0, out
    rs = (await sets_of(c))[name]
    assert rs["spec"]["replicas"] == 4
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] == "4"
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"] == "5"
    scaling = [e["message"] for e in await events_of(c, "Deployment", "sc") if e["reason"] == "ScalingReplicaSet"]
    assert scaling[-1] == f"Scaled up replica set {name} to 4 from 2"

    # Someone left a wrong desired-replicas on the ReplicaSet: the next rollout still happens.
    await c.patch(ReplicaSet, name, {"metadata": {"annotations": {"deployment.kubernetes.io/desired-replicas": "7"}}},
                  namespace=NS, patch_type=PatchType.MERGE)
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/sc", "gw=gw:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/sc", "--timeout=60s")
    assert code == 0 and 'deployment "sc" successfully rolled out' in out, out
    assert len(await sets_of(c)) == 2
