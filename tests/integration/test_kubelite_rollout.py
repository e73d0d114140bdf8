"""kube-lite's Deployments through ReplicaSets (rollout status, history, undo with kubectl) and the
Endpoints it keeps beside each Service's EndpointSlices, against an in-process apiserver."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from lightkube.resources.apps_v1 import ControllerRevision, Deployment, ReplicaSet, StatefulSet
from lightkube.resources.core_v1 import Endpoints, Service

from isthmus.local.kubelite import WORKLOAD_ANNOTATION
from tests.harness.kubelite import NS, Lite, create, echo_deployment, kubectl, pods_of
from tests.harness.polling import eventually

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed"),
]

REVISION = "deployment.kubernetes.io/revision"


async def replicasets(lite: Lite) -> dict[str, dict[str, Any]]:
    return {
        rs.metadata.name: rs.to_dict()  # type: ignore[union-attr]
        async for rs in lite.client.list(ReplicaSet, namespace=NS)
    }


async def test_rollout_history_and_undo(apiserver: Any, lite: Lite) -> None:
    kc = apiserver.kubeconfig
    await create(lite.client, Deployment, echo_deployment("web", 2))
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out

    sets = await replicasets(lite)
    assert len(sets) == 1
    (first,) = sets.values()
    h = first["metadata"]["labels"]["pod-template-hash"]
    assert first["metadata"]["name"] == f"web-{h}" and first["metadata"]["annotations"][REVISION] == "1"
    owner = first["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Deployment" and owner["name"] == "web" and owner["controller"] is True
    assert first["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": h}
    st = first["status"]
    assert st["replicas"] == st["readyReplicas"] == st["availableReplicas"] == 2
    assert st["observedGeneration"] == first["metadata"]["generation"]
    for p in await pods_of(lite.client, {"app": "web"}):
        assert p["metadata"]["ownerReferences"][0]["name"] == f"web-{h}"
    deploy = (await lite.client.get(Deployment, "web", namespace=NS)).to_dict()
    conds = {c["type"]: c for c in deploy["status"]["conditions"]}
    assert conds["Available"]["reason"] == "MinimumReplicasAvailable"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert deploy["metadata"]["annotations"][REVISION] == "1"

    # A new template: a second ReplicaSet, the first scaled to 0 and kept for history.
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/web", "echo=echo:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out
    sets = await replicasets(lite)
    assert len(sets) == 2 and sets[f"web-{h}"]["spec"]["replicas"] == 0
    (second,) = (rs for name, rs in sets.items() if name != f"web-{h}")
    assert second["metadata"]["annotations"][REVISION] == "2" and second["spec"]["replicas"] == 2
    assert second["spec"]["template"]["spec"]["containers"][0]["image"] == "echo:v2"

    async def old_pods_gone() -> bool:
        pods = await pods_of(lite.client, {"app": "web"})
        return len(pods) == 2 and all(
            p["spec"]["containers"][0]["image"] == "echo:v2" for p in pods
        )

    await eventually(old_pods_gone, what="old pods replaced")
    code, out = await kubectl(kc, "-n", NS, "rollout", "history", "deploy/web")
    assert code == 0, out
    revisions = [line.split()[0] for line in out.splitlines()[2:] if line.strip()]
    assert revisions == ["1", "2"], out

    # Undo: back to the first template; its ReplicaSet is reused and becomes revision 3.
    code, out = await kubectl(kc, "-n", NS, "rollout", "undo", "deploy/web")
    assert code == 0 and "rolled back" in out, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert code == 0 and "successfully rolled out" in out, out
    sets = await replicasets(lite)
    assert len(sets) == 2, sorted(sets)
    assert sets[f"web-{h}"]["metadata"]["annotations"][REVISION] == "3"
    assert sets[f"web-{h}"]["spec"]["replicas"] == 2
    assert sets[second["metadata"]["name"]]["spec"]["replicas"] == 0
    code, out = await kubectl(kc, "-n", NS, "rollout", "history", "deploy/web")
    assert [line.split()[0] for line in out.splitlines()[2:] if line.strip()] == ["2", "3"], out
    code, out = await kubectl(kc, "-n", NS, "get", "deploy", "web", "--no-headers")
    assert code == 0 and out.split()[1:4] == ["2/2", "2", "2"], out
    code, out = await kubectl(kc, "-n", NS, "get", "rs", f"web-{h}", "--no-headers")
    assert code == 0 and out.split()[:4] == [f"web-{h}", "2", "2", "2"], out  # desired, current, ready

    # Deleting the Deployment takes its ReplicaSets and their Pods (garbage collector).
    await lite.client.delete(Deployment, "web", namespace=NS)

    async def all_gone() -> bool:
        return not await replicasets(lite) and not await pods_of(lite.client, {"app": "web"})

    await eventually(all_gone, what="replicasets and pods collected")


async def test_endpoints_beside_slices(apiserver: Any, lite: Lite) -> None:
    c = lite.client
    await create(c, Deployment, echo_deployment("ep", 2))
    await create(
        c,
        Service,
        {
            "metadata": {"name": "ep", "labels": {"team": "a"}},
            "spec": {
                "selector": {"app": "ep"},
                "ports": [
                    {"name": "web", "port": 80, "targetPort": "http"},
                    {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "UDP"},
                ],
            },
        },
    )
    await create(c, Service, {"metadata": {"name": "manual"}, "spec": {"ports": [{"port": 80}]}})

    async def ready_ips() -> list[str] | None:
        try:
            ep = (await c.get(Endpoints, "ep", namespace=NS)).to_dict()
        except Exception:
            return None
        subsets = ep.get("subsets") or []
        ips = sorted(a["ip"] for s in subsets for a in s.get("addresses") or [])
        return ips if len(ips) == 2 else None

    ips = await eventually(ready_ips, what="2 ready addresses")
    pods = await pods_of(c, {"app": "ep"})
    assert ips == sorted(p["status"]["podIP"] for p in pods)
    ep = (await c.get(Endpoints, "ep", namespace=NS)).to_dict()
    assert ep["metadata"]["labels"] == {"team": "a"}
    (subset,) = ep["subsets"]
    assert sorted((p["name"], p["port"], p["protocol"]) for p in subset["ports"]) == [
        ("dns", 5353, "UDP"),
        ("web", 8080, "TCP"),
    ]
    addr = subset["addresses"][0]
    assert addr["nodeName"] == "c1-node" and addr["targetRef"]["kind"] == "Pod" and addr["targetRef"]["uid"]
    code, out = await kubectl(
        apiserver.kubeconfig, "-n", NS, "get", "endpoints", "ep", "-o", "jsonpath={.subsets[*].addresses[*].ip}"
    )
    assert code == 0 and sorted(out.split()) == ips, out

    # Services without a selector keep user-managed Endpoints (none here): nothing is made for them.
    assert [e.metadata.name async for e in c.list(Endpoints, namespace=NS)].count("manual") == 0  # type: ignore[union-attr]

    await c.delete(Service, "ep", namespace=NS)

    async def deleted() -> bool:
        return "ep" not in [e.metadata.name async for e in c.list(Endpoints, namespace=NS)]  # type: ignore[union-attr]

    await eventually(deleted, what="endpoints of a deleted service removed")


async def test_replicaset_name_taken_by_another_template_counts_a_collision(lite: Lite) -> None:
    c = lite.client
    await create(c, Deployment, echo_deployment("col", 1))
    first = await eventually(lambda: replicasets(lite), what="the first replicaset")
    (name,) = first
    await c.delete(Deployment, "col", namespace=NS)
    await eventually(lambda: _none(replicasets(lite)), what="replicaset collected")
    # Someone else's ReplicaSet under the very name the Deployment's template hashes to.
    other = echo_deployment("other", 0)
    await create(
        c,
        ReplicaSet,
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name}, "spec": other["spec"]},
    )
    await create(c, Deployment, echo_deployment("col", 1))

    async def own_set() -> list[str]:
        sets = await replicasets(lite)
        return [n for n, rs in sets.items() if n != name and rs["metadata"].get("ownerReferences")]

    (mine,) = await eventually(own_set, what="a replicaset under another name")
    deploy = (await c.get(Deployment, "col", namespace=NS)).to_dict()
    assert deploy["status"]["collisionCount"] == 1 and mine != name
    assert not (await replicasets(lite))[name]["metadata"].get("ownerReferences")  # left alone


async def _none(coro: Any) -> bool:
    return not await coro


async def test_statefulset_revisions_history_and_undo(apiserver: Any, lite: Lite) -> None:
    kc = apiserver.kubeconfig
    await create(
        lite.client,
        StatefulSet,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}, "annotations": {WORKLOAD_ANNOTATION: "echo"}},
                    "spec": {"containers": [{"name": "db", "image": "db:v1"}]},
                },
            },
        },
    )
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "sts/db", "--timeout=60s")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "set", "image", "sts/db", "db=db:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "sts/db", "--timeout=60s")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "history", "sts/db")
    assert [line.split()[0] for line in out.splitlines()[2:] if line.strip()] == ["1", "2"], out
    revs = {
        r.metadata.name: r.to_dict()  # type: ignore[union-attr]
        async for r in lite.client.list(ControllerRevision, namespace=NS)
    }
    sts = (await lite.client.get(StatefulSet, "db", namespace=NS)).to_dict()
    current = revs[sts["status"]["updateRevision"]]
    assert current["revision"] == 2 and current["metadata"]["ownerReferences"][0]["name"] == "db"
    assert current["data"]["spec"]["template"]["spec"]["containers"][0]["image"] == "db:v2"

    code, out = await kubectl(kc, "-n", NS, "rollout", "undo", "sts/db")
    assert code == 0 and "rolled back" in out, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "sts/db", "--timeout=60s")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "history", "sts/db")
    assert [line.split()[0] for line in out.splitlines()[2:] if line.strip()] == ["2", "3"], out
    pods = await pods_of(lite.client, {"app": "db"})
    assert sorted(p["spec"]["containers"][0]["image"] for p in pods) == ["db:v1", "db:v1"]
