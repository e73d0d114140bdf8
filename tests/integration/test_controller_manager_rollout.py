"""deploy/member's controller manager, run by kube-lite as real processes, as kubectl shows it: both
replicas ready (one leads, the other stands by healthy), the PodDisruptionBudget counts both, and
`kubectl rollout restart` completes (a readiness that needed the Lease would leave the surged pod
unready and the rollout stuck: issue 43's defect 4), the Lease ending with a pod of the new
ReplicaSet."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget

from isthmus.kube.helpers import install_crds
from isthmus.kube.manifests import apply, deploy_dir, render
from tests.harness.apiserver import RunningApiServer
from tests.harness.kubelite import kubectl
from tests.harness.polling import eventually
from tests.integration.test_kubelite_processes import ProcLite

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180),
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]

NS = "isthmus-system"
NAME = "isthmus-controller-manager"


def manifests() -> list[dict[str, Any]]:
    """deploy/member without the other Deployments; the manager runs only the egress operator (mcsvc
    would wait for `isthmus join`, which this test has no broker for) and is probed every second."""
    objs = [o for o in render(deploy_dir() / "member")
            if o["kind"] != "Deployment" or o["metadata"]["name"] == NAME]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["args"].append("--controllers=egress-operator")  # a later flag wins
    container["readinessProbe"]["periodSeconds"] = 1
    return objs


async def test_both_replicas_are_ready_under_the_budget_and_a_rollout_completes(tmp_path: Path) -> None:
    run = RunningApiServer(tmp_path / "apiserver", token="admin-token", tls=True, bookmark_interval=1.0)
    await run.start()
    client = run.client()
    lite = ProcLite(client, tmp_path / "kubelet", run.server.port)
    await lite.start()
    try:
        await install_crds(client)
        await apply(client, manifests(), field_manager="isthmus-test")

        async def available() -> bool:
            status = (await client.get(Deployment, NAME, namespace=NS)).to_dict().get("status") or {}
            return (status.get("readyReplicas"), status.get("availableReplicas")) == (2, 2)

        await eventually(available, within=90, what="both replicas ready")
        pods = {p.metadata.name for p in [p async for p in client.list(Pod, namespace=NS)]}  # type: ignore[union-attr]
        lease = (await client.get(Lease, "isthmus-egress-operator", namespace=NS)).to_dict()
        assert lease["spec"]["holderIdentity"] in pods  # one leads; the other is ready standing by

        async def budget() -> dict[str, Any] | None:
            status = (await client.get(PodDisruptionBudget, NAME, namespace=NS)).to_dict().get("status") or {}
            return status if status.get("currentHealthy") == 2 else None

        status = await eventually(budget, what="the budget counts both replicas")
        assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 1)

        code, out = await kubectl(run.kubeconfig, "-n", NS, "rollout", "restart", f"deploy/{NAME}")
        assert code == 0, out
        code, out = await kubectl(run.kubeconfig, "-n", NS, "rollout", "status", f"deploy/{NAME}", "--timeout=50s")
        assert code == 0 and "successfully rolled out" in out, out
        dep = (await client.get(Deployment, NAME, namespace=NS)).to_dict()
        conds = {c["type"]: c for c in dep["status"]["conditions"]}
        assert (conds["Available"]["status"], conds["Progressing"]["reason"]) == ("True", "NewReplicaSetAvailable")

        async def new_holder() -> bool:
            live = {p.metadata.name for p in [p async for p in client.list(Pod, namespace=NS)]  # type: ignore[union-attr]
                    if not p.metadata.deletionTimestamp}  # type: ignore[union-attr]
            spec = (await client.get(Lease, "isthmus-egress-operator", namespace=NS)).to_dict()["spec"]
            return spec.get("holderIdentity") in live - pods

        await eventually(new_holder, what="the Lease held by a pod of the new ReplicaSet")
    finally:
        await lite.stop()
        await client.close()
        await run.close()
