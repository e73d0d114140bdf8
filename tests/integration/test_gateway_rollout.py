"""Defect 4's fix, as kubectl shows it: with the egress gateway's strategy from deploy/member and
Pods ready only while leading, an upgrade replaces both Pods (kube-lite's Deployment controller
paces it as kube's does); the rolling alternative the issue offered (maxUnavailable 1, maxSurge 0)
keeps the old leader for ever, which is why the manifest recreates. The controllers and the stand-in kubelet are
tests/integration/test_kubelite_deployment_rollout.py's."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from isthmus.kube.manifests import deploy_dir, render
from tests.harness.kubelite import NS, create, kubectl
from tests.harness.polling import eventually
from tests.integration.test_kubelite_deployment_rollout import (  # noqa: F401 (the ctl fixture)
    Controllers,
    _pods_ready,
    ctl,
    gateway,
    progressing,
)

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]


def manifest_strategy() -> dict[str, Any]:
    dep = next(o for o in render(deploy_dir() / "member")
               if o["kind"] == "Deployment" and o["metadata"]["name"] == "isthmus-egress-gateway")
    assert dep["spec"]["replicas"] == 2
    return dict(dep["spec"]["strategy"])


async def test_the_manifests_gateway_upgrade_replaces_both_pods(apiserver: Any, ctl: Controllers) -> None:  # noqa: F811
    """Recreate: both old Pods go, two new ones start and one of them leads (is ready). kube still
    counts the standby as unavailable (docs/deploy.md says so): what completes is the upgrade itself."""
    kc, c = apiserver.kubeconfig, ctl.client
    ctl.kubelet.ready = ctl.kubelet.leader_only
    await create(c, Deployment, gateway("gw", 2, strategy=manifest_strategy()))
    await eventually(lambda: _pods_ready(c, 1, of=2), what="the leader ready, the standby not")
    old = {p.metadata.name async for p in c.list(Pod, namespace=NS)}
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/gw", "gw=gw:v2")
    assert code == 0, out

    async def replaced() -> bool:
        pods = [p.to_dict() async for p in c.list(Pod, namespace=NS)]
        return (len(pods) == 2 and not {p["metadata"]["name"] for p in pods} & old
                and all(p["spec"]["containers"][0]["image"] == "gw:v2" for p in pods)
                and await _pods_ready(c, 1, of=2))

    await eventually(replaced, what="two new gw:v2 Pods, one of them leading")
    deploy = (await c.get(Deployment, "gw", namespace=NS)).to_dict()
    assert (deploy["status"]["updatedReplicas"], deploy["status"]["readyReplicas"]) == (2, 1)


async def test_max_unavailable_one_keeps_the_leader_and_stalls(apiserver: Any, ctl: Controllers) -> None:  # noqa: F811
    """minAvailable = 2 - 1 = 1 is the leader itself: the standby is replaced, its successor cannot
    become ready while the old leader leads, and nothing may go further."""
    kc, c = apiserver.kubeconfig, ctl.client
    ctl.kubelet.ready = ctl.kubelet.leader_only
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    await create(c, Deployment, gateway("gw", 2, progressDeadlineSeconds=3, strategy=rolling))
    await eventually(lambda: _pods_ready(c, 1, of=2), what="the leader ready, the standby not")
    code, out = await kubectl(kc, "-n", NS, "set", "image", "deploy/gw", "gw=gw:v2")
    assert code == 0, out
    code, out = await kubectl(kc, "-n", NS, "rollout", "status", "deploy/gw", "--timeout=60s")
    assert code == 1, out
    assert 'error: deployment "gw" exceeded its progress deadline' in out, out
    deploy = (await c.get(Deployment, "gw", namespace=NS)).to_dict()
    assert progressing(deploy)["reason"] == "ProgressDeadlineExceeded"
