"""Defect 4 done right, as kubectl shows it: the egress gateway's Pods are ready when healthy (the
leader is picked by a label, not by readiness), so the manifest's RollingUpdate (maxUnavailable 1,
maxSurge 0) completes and `kubectl rollout status` succeeds; and the leader's
controller.kubernetes.io/pod-deletion-cost makes the ReplicaSet controller replace the standby
first, as kube's does, so leadership moves once per upgrade. The controllers and the stand-in
kubelet are tests/integration/test_kubelite_deployment_rollout.py's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from isthmus.api.egress import LEADER_DELETION_COST, POD_DELETION_COST
from isthmus.kube.manifests import deploy_dir, render
from tests.harness.kubelite import NS, create, kubectl
from tests.harness.polling import eventually
from tests.integration.test_kubelite_deployment_rollout import (  # noqa: F401 (the ctl fixture)
    Controllers,
    _pods_ready,
    ctl,
    gateway,
)

pytestmark = [pytest.mark.timeout(120)]


def manifest_strategy() -> dict[str, Any]:
    dep = next(o for o in render(deploy_dir() / "member")
               if o["kind"] == "Deployment" and o["metadata"]["name"] == "isthmus-egress-gateway")
    assert dep["spec"]["replicas"] == 2
    return dict(dep["spec"]["strategy"])


async def _live(c: Any) -> list[dict[str, Any]]:
    return sorted([p.to_dict() async for p in c.list(Pod, namespace=NS)], key=lambda p: p["metadata"]["creationTimestamp"])


async def test_the_manifests_gateway_upgrade_completes(apiserver: Any, ctl: Controllers) -> None:  # noqa: F811
    kc, c = apiserver.kubeconfig, ctl.client
    assert manifest_strategy() == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    await create(c, Deployment, gateway("gw", 2, progressDeadlineSeconds=30, strategy=manifest_strategy()))
    await eventually(lambda: _pods_ready(c, 2, of=2), what="both replicas ready (healthy)")
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/gw", "gw=gw:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/gw", "--timeout=60s")
    assert code == 0, out
    assert 'deployment "gw" successfully rolled out' in out, out
    deploy = (await c.get(Deployment, "gw", namespace=NS)).to_dict()
    conds = {x["type"]: x for x in deploy["status"]["conditions"]}
    assert (conds["Available"]["status"], conds["Progressing"]["reason"]) == ("True", "NewReplicaSetAvailable")
    assert (deploy["status"]["updatedReplicas"], deploy["status"]["availableReplicas"]) == (2, 2)


async def test_the_leaders_deletion_cost_replaces_the_standby_first(apiserver: Any, ctl: Controllers) -> None:  # noqa: F811
    """Without a cost the newer Pod goes first; the leader marks itself, so the other one goes."""
    kc, c = apiserver.kubeconfig, ctl.client
    ctl.kubelet.finish = False  # terminating Pods stay: the first one chosen is seen
    await create(c, Deployment, gateway("gw", 1, strategy=manifest_strategy()))
    await eventually(lambda: _pods_ready(c, 1, of=1), what="the first replica ready")
    await asyncio.sleep(1.1)  # creationTimestamp has whole seconds: the second Pod is newer
    code, out = await kubectl(kc, "-n", NS, "scale", "deploy/gw", "--replicas=2")
    assert code == 0, out
    await eventually(lambda: _pods_ready(c, 2, of=2), what="both replicas ready")
    older, newer = [p["metadata"]["name"] for p in await _live(c)]
    await c.patch(Pod, newer, {"metadata": {"annotations": {POD_DELETION_COST: LEADER_DELETION_COST}}},
                  namespace=NS, patch_type=PatchType.MERGE)
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/gw", "gw=gw:v2")
    assert code == 0, out

    async def first_terminating() -> list[str]:
        return [p["metadata"]["name"] for p in await _live(c) if p["metadata"].get("deletionTimestamp")]

    assert await eventually(first_terminating, what="an old Pod scaled down") == [older]
    ctl.kubelet.finish = True
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/gw", "--timeout=60s")
    assert code == 0, out
