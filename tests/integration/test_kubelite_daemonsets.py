"""kube-lite's DaemonSets against an in-process apiserver: one Pod per matching Node as its labels
change, rolling and OnDelete updates through ControllerRevisions, status, and real kubectl."""

from __future__ import annotations

import asyncio
import random
import shutil
from typing import Any

import pytest
from lightkube.resources.apps_v1 import ControllerRevision, DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from isthmus.local.kubelite import WORKLOAD_ANNOTATION
from isthmus.local.kubelite.daemonsets import (
    DaemonSetPlan,
    daemon_tolerations,
    daemonset_plan,
    daemonset_status,
    node_should_run,
)
from tests.harness.kubelite import NS, Lite, create, kubectl, pods_of
from tests.harness.polling import eventually

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed"),
]

EDGE = "isthmus.io/edge"


def echo_daemonset(name: str, *, version: str = "v1", node_selector: dict[str, str] | None = None,
                   strategy: str = "RollingUpdate") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "echo", "image": f"echo:{version}",
                                            "ports": [{"name": "http", "containerPort": 8080}]}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": strategy},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {WORKLOAD_ANNOTATION: "echo"}},
                "spec": spec,
            },
        },
    }


async def node_name(lite: Lite) -> str:
    async def one() -> str | None:
        nodes = [n async for n in lite.client.list(Node)]
        return nodes[0].metadata.name if nodes and nodes[0].metadata else None  # type: ignore[return-value]

    return str(await eventually(one, what="node registered"))


async def live_pods(lite: Lite, app: str) -> list[dict[str, Any]]:
    return [p for p in await pods_of(lite.client, {"app": app}) if not p["metadata"].get("deletionTimestamp")]


async def ds_status(lite: Lite, name: str) -> dict[str, Any]:
    return (await lite.client.get(DaemonSet, name, namespace=NS)).to_dict().get("status") or {}


async def label_node(kc: str, node: str, *labels: str) -> None:
    code, out = await kubectl(kc, "label", "node", node, "--overwrite", *labels)
    assert code == 0, out


async def test_pods_follow_node_labels(apiserver: Any, lite: Lite) -> None:
    kc = apiserver.kubeconfig
    node = await node_name(lite)
    await create(lite.client, DaemonSet, echo_daemonset("edge", node_selector={EDGE: "true"}))

    async def status_is(want: dict[str, int]) -> dict[str, Any] | None:
        st = await ds_status(lite, "edge")
        return st if all(int(st.get(k) or 0) == v for k, v in want.items()) else None

    # No Node carries the label: nothing to run, and the DaemonSet says so.
    await eventually(lambda: status_is({"desiredNumberScheduled": 0, "observedGeneration": 1}), what="observed")
    assert await live_pods(lite, "edge") == []

    # kubectl label node: the daemon Pod is created on it.
    await label_node(kc, node, f"{EDGE}=true")

    async def one_ready_pod() -> dict[str, Any] | None:
        pods = await live_pods(lite, "edge")
        ok = len(pods) == 1 and any(
            c["type"] == "Ready" and c["status"] == "True" for c in pods[0].get("status", {}).get("conditions") or []
        )
        return pods[0] if ok else None

    pod = await eventually(one_ready_pod, what="daemon pod ready")
    meta = pod["metadata"]
    assert meta["name"].startswith("edge-") and len(meta["name"]) == len("edge-") + 5
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("DaemonSet", "edge", True)
    assert pod["spec"]["nodeName"] == node
    assert meta["labels"]["pod-template-generation"] == "1"
    revisions = [r.to_dict() async for r in lite.client.list(ControllerRevision, namespace=NS)]
    assert [r["metadata"]["name"] for r in revisions] == [f"edge-{meta['labels']['controller-revision-hash']}"]
    assert revisions[0]["revision"] == 1 and revisions[0]["metadata"]["ownerReferences"][0]["name"] == "edge"
    tolerated = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
    assert ("node.kubernetes.io/not-ready", "NoExecute") in tolerated
    assert ("node.kubernetes.io/unschedulable", "NoSchedule") in tolerated

    st = await eventually(lambda: status_is({"numberAvailable": 1}), what="available")
    assert st["desiredNumberScheduled"] == st["currentNumberScheduled"] == st["numberReady"] == 1
    assert st["updatedNumberScheduled"] == 1 and int(st.get("numberMisscheduled") or 0) == 0
    assert int(st.get("numberUnavailable") or 0) == 0

    # A deleted daemon Pod comes back (a new name).
    await lite.client.delete(Pod, meta["name"], namespace=NS)
    again = await eventually(one_ready_pod, what="daemon pod recreated")
    assert again["metadata"]["name"] != meta["name"]

    # The Node stops matching: its daemon Pod goes, and nothing is desired any more.
    await label_node(kc, node, f"{EDGE}=false")

    async def gone() -> bool:
        return await live_pods(lite, "edge") == []

    await eventually(gone, what="daemon pod removed")
    st = await eventually(lambda: status_is({"desiredNumberScheduled": 0, "currentNumberScheduled": 0,
                                             "numberMisscheduled": 0, "numberAvailable": 0}), what="status zero")
    # Go's omitempty: the zero counters kube omits are gone, the four required ones stay.
    assert not {"numberAvailable", "numberUnavailable", "updatedNumberScheduled"} & set(st), st
    assert st["desiredNumberScheduled"] == st["numberReady"] == 0, st

    # kubectl label node ... key- (removal) with a NotIn affinity: matching again.
    await lite.client.patch(
        DaemonSet, "edge",
        {"spec": {"template": {"spec": {"nodeSelector": None, "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": EDGE, "operator": "NotIn", "values": ["false"]}]}]}}}}}}},
        namespace=NS, patch_type=PatchType.MERGE,
    )
    code, out = await kubectl(kc, "label", "node", node, f"{EDGE}-")
    assert code == 0, out
    await eventually(one_ready_pod, what="daemon pod after label removed")

    # Deleting the DaemonSet deletes its Pods (garbage collector).
    await lite.client.delete(DaemonSet, "edge", namespace=NS)

    async def all_gone() -> bool:
        return await pods_of(lite.client, {"app": "edge"}) == []

    await eventually(all_gone, within=30, what="pods garbage-collected")


async def test_rolling_update_and_kubectl(apiserver: Any, lite: Lite) -> None:
    kc = apiserver.kubeconfig
    await node_name(lite)
    await create(lite.client, DaemonSet, echo_daemonset("agent"))
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "ds/agent", "--timeout=60s")
    assert code == 0 and 'daemon set "agent" successfully rolled out' in out, out
    (first,) = await live_pods(lite, "agent")

    code, out = await kubectl(kc, "-n", NS, "get", "ds", "agent")
    assert code == 0, out
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE",
                              "SELECTOR", "AGE"], out
    assert row.split()[:7] == ["agent", "1", "1", "1", "1", "1", "<none>"], out

    # A new template: the old Pod is replaced by one of the new revision.
    code, out = await kubectl(kc, "-n", NS, "set", "image", "ds/agent", "echo=echo:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "ds/agent", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out
    (second,) = await live_pods(lite, "agent")
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["spec"]["containers"][0]["image"] == "echo:v2"
    new_hash = second["metadata"]["labels"]["controller-revision-hash"]
    assert new_hash != first["metadata"]["labels"]["controller-revision-hash"]
    revisions = {r.metadata.name: r.revision async for r in lite.client.list(ControllerRevision, namespace=NS)}  # type: ignore[union-attr]
    assert revisions[f"agent-{new_hash}"] == 2 and len(revisions) == 2
    st = await ds_status(lite, "agent")
    assert st["updatedNumberScheduled"] == st["numberAvailable"] == st["desiredNumberScheduled"] == 1

    code, out = await kubectl(kc, "-n", NS, "rollout", "history", "ds/agent")
    assert code == 0, out
    assert [line.split()[0] for line in out.splitlines()[2:] if line.strip()] == ["1", "2"], out

    # kubectl rollout undo applies the previous ControllerRevision: back to v1, now revision 3.
    code, out = await kubectl(kc, "-n", NS, "rollout", "undo", "ds/agent")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "ds/agent", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out
    (third,) = await live_pods(lite, "agent")
    assert third["spec"]["containers"][0]["image"] == "echo:v1"
    old_hash = first["metadata"]["labels"]["controller-revision-hash"]
    assert third["metadata"]["labels"]["controller-revision-hash"] == old_hash
    revisions = {r.metadata.name: r.revision async for r in lite.client.list(ControllerRevision, namespace=NS)}  # type: ignore[union-attr]
    assert revisions == {f"agent-{old_hash}": 3, f"agent-{new_hash}": 2}


async def test_host_network_daemon_pod_has_the_node_address(lite: Lite) -> None:
    node = await node_name(lite)
    body = echo_daemonset("hostnet")
    spec = body["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["containers"][0]["ports"] = [{"name": "http", "containerPort": random.randint(40000, 49999)}]
    await create(lite.client, DaemonSet, body)

    async def addressed() -> dict[str, Any] | None:
        pods = await live_pods(lite, "hostnet")
        return pods[0] if len(pods) == 1 and (pods[0].get("status") or {}).get("podIP") else None

    pod = await eventually(addressed, what="host network pod addressed")
    node_ip = next(
        a["address"] for a in (await lite.client.get(Node, node)).to_dict()["status"]["addresses"]
        if a["type"] == "InternalIP"
    )
    assert pod["spec"]["hostNetwork"] is True and pod["spec"]["nodeName"] == node
    assert pod["status"]["podIP"] == pod["status"]["hostIP"] == node_ip
    tolerated = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in tolerated
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}


async def test_surge_rollout_finishes(apiserver: Any, lite: Lite) -> None:
    """maxSurge 1 / maxUnavailable 0: the rollout completes with one Pod of the new template left."""
    kc = apiserver.kubeconfig
    await node_name(lite)
    body = echo_daemonset("surge")
    body["spec"]["updateStrategy"]["rollingUpdate"] = {"maxSurge": 1, "maxUnavailable": 0}
    await create(lite.client, DaemonSet, body)
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "ds/surge", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out
    (first,) = await live_pods(lite, "surge")
    code, out = await kubectl(kc, "-n", NS, "set", "image", "ds/surge", "echo=echo:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "ds/surge", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out

    async def only_new() -> list[dict[str, Any]] | None:
        pods = await live_pods(lite, "surge")
        return pods if len(pods) == 1 and pods[0]["metadata"]["name"] != first["metadata"]["name"] else None

    (pod,) = await eventually(only_new, what="old pod removed after surge")
    assert pod["spec"]["containers"][0]["image"] == "echo:v2"


async def test_on_delete_waits_for_the_pod_to_be_deleted(apiserver: Any, lite: Lite) -> None:
    kc = apiserver.kubeconfig
    await node_name(lite)
    await create(lite.client, DaemonSet, echo_daemonset("ondel", strategy="OnDelete"))

    async def one_pod() -> dict[str, Any] | None:
        st = await ds_status(lite, "ondel")
        pods = await live_pods(lite, "ondel")
        return pods[0] if len(pods) == 1 and int(st.get("numberAvailable") or 0) == 1 else None

    first = await eventually(one_pod, what="pod")
    code, out = await kubectl(kc, "-n", NS, "set", "image", "ds/ondel", "echo=echo:v2")
    assert code == 0, out

    async def observed() -> dict[str, Any] | None:
        ds = (await lite.client.get(DaemonSet, "ondel", namespace=NS)).to_dict()
        st = ds.get("status") or {}
        return st if st.get("observedGeneration") == ds["metadata"]["generation"] else None

    st = await eventually(observed, what="update observed")
    assert int(st.get("updatedNumberScheduled") or 0) == 0 and st["numberAvailable"] == 1
    # kubectl refuses rollout status for OnDelete, as against a real cluster.
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "ds/ondel", "--timeout=5s")
    assert code != 0 and "rollout status is only available for RollingUpdate strategy type" in out, out
    (still,) = await live_pods(lite, "ondel")
    assert still["metadata"]["name"] == first["metadata"]["name"]  # not replaced

    await lite.client.delete(Pod, first["metadata"]["name"], namespace=NS)

    async def replaced() -> dict[str, Any] | None:
        pod = await one_pod()
        return pod if pod and pod["metadata"]["name"] != first["metadata"]["name"] else None

    second = await eventually(replaced, what="replacement with the new template")
    assert second["spec"]["containers"][0]["image"] == "echo:v2"
    await eventually(lambda: _updated(lite, "ondel"), what="updated counted")


async def _updated(lite: Lite, name: str) -> bool:
    return int((await ds_status(lite, name)).get("updatedNumberScheduled") or 0) == 1


def test_node_eligibility_as_kube() -> None:
    """nodeSelector, required affinity operators and taints, as NodeShouldRunDaemonPod decides."""
    node = {"metadata": {"name": "n1", "labels": {"zone": "a", "edge": "true"}}, "spec": {}}

    def ds(**pod_spec: Any) -> dict[str, Any]:
        return {"spec": {"template": {"spec": pod_spec}}}

    def affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}

    assert node_should_run(ds(), node) == (True, True)
    assert node_should_run(ds(nodeSelector={"zone": "b"}), node) == (False, False)
    assert node_should_run(ds(affinity=affinity({"key": "zone", "operator": "In", "values": ["a", "b"]})), node)[0]
    assert not node_should_run(ds(affinity=affinity({"key": "zone", "operator": "NotIn", "values": ["a"]})), node)[0]
    assert node_should_run(ds(affinity=affinity({"key": "gpu", "operator": "DoesNotExist"})), node)[0]
    assert not node_should_run(ds(affinity=affinity({"key": "gpu", "operator": "Exists"})), node)[0]
    assert not node_should_run(ds(nodeName="n2"), node)[0]

    tainted = {**node, "spec": {"taints": [{"key": "dedicated", "value": "edge", "effect": "NoSchedule"}]}}
    assert node_should_run(ds(), tainted) == (False, True)  # no new Pod, an existing one stays
    tolerating = ds(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "edge"}])
    assert node_should_run(tolerating, tainted) == (True, True)
    evicting = {**node, "spec": {"taints": [{"key": "dedicated", "effect": "NoExecute"}]}}
    assert node_should_run(ds(), evicting) == (False, False)
    not_ready = {**node, "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}}
    assert node_should_run(ds(), not_ready) == (True, True)  # daemon Pods tolerate it by default

    keys = {(t["key"], t["effect"]) for t in daemon_tolerations({"hostNetwork": True})}
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in keys
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") not in {
        (t["key"], t["effect"]) for t in daemon_tolerations({})
    }


def _pod(name: str, pod_hash: str, ready: bool, created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created, "labels": {"controller-revision-hash": pod_hash}},
        "spec": {"nodeName": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_rolling_update_plans_as_kube() -> None:
    """maxSurge 0: the old Pod goes first, the new one comes once it is gone; maxSurge 1: the new Pod
    first, beside the old one, which goes once the new one is available."""
    node = {"metadata": {"name": "n1", "labels": {}}, "spec": {}}
    ds: dict[str, Any] = {"metadata": {"name": "d", "generation": 2}, "spec": {
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
        "template": {"spec": {}}}}
    old = _pod("d-old", "h1", True, "2026-01-01T00:00:00Z")
    plan = daemonset_plan(ds, [node], [old], "h2", 0.0)
    assert plan.delete == ["d-old"] and plan.create == {}
    terminating = {**old, "metadata": {**old["metadata"], "deletionTimestamp": "2026-01-01T00:01:00Z"}}
    assert daemonset_plan(ds, [node], [terminating], "h2", 0.0) == DaemonSetPlan()  # waits for it to go
    assert list(daemonset_plan(ds, [node], [], "h2", 0.0).create.values()) == ["n1"]

    ds["spec"]["updateStrategy"]["rollingUpdate"] = {"maxUnavailable": 0, "maxSurge": 1}
    plan = daemonset_plan(ds, [node], [old], "h2", 0.0)
    assert plan.delete == [] and list(plan.create.values()) == ["n1"]
    new = _pod("d-new", "h2", False, "2026-01-01T00:02:00Z")
    assert daemonset_plan(ds, [node], [old, new], "h2", 0.0) == DaemonSetPlan()  # both stay until new is ready
    status = daemonset_status(ds, [node], [old, new], "h2", 0.0)
    assert "updatedNumberScheduled" not in status and status["numberAvailable"] == 1  # the oldest Pod counts
    new_ready = _pod("d-new", "h2", True, "2026-01-01T00:02:00Z")
    assert daemonset_plan(ds, [node], [old, new_ready], "h2", 0.0).delete == ["d-old"]


async def test_restart_keeps_the_daemon_pod(lite: Lite) -> None:
    await node_name(lite)
    await create(lite.client, DaemonSet, echo_daemonset("keep"))

    async def available() -> bool:
        return int((await ds_status(lite, "keep")).get("numberAvailable") or 0) == 1

    await eventually(available, what="available")
    (before,) = await live_pods(lite, "keep")
    await lite.stop()
    await lite.start()
    # A template change after the restart proves the controller runs again; until then the Pod stays.
    await asyncio.sleep(2)
    (after,) = await live_pods(lite, "keep")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    await lite.client.patch(
        DaemonSet, "keep", {"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}},
        namespace=NS, patch_type=PatchType.MERGE,
    )

    async def replaced() -> bool:
        pods = await live_pods(lite, "keep")
        return len(pods) == 1 and pods[0]["metadata"]["uid"] != before["metadata"]["uid"]

    await eventually(replaced, what="rolled after restart")
