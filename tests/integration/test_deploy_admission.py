"""deploy/member through the embedded apiserver's pod admission (Pod Security as kube-apiserver
v1.32 builds it in, ServiceAccount, Priority), seen with kubectl: applying it prints no PodSecurity
warning, and a Pod of every Deployment's template is admitted in isthmus-system, which enforces
`restricted` (server-side dry run: admission runs, nothing is stored or started)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from isthmus.kube.manifests import deploy_dir, render
from tests.harness.apiserver import RunningApiServer
from tests.integration.test_shared_crds import kubectl

pytestmark = [pytest.mark.timeout(120)]

DEPLOY = deploy_dir()


def pod_of(deployment: dict[str, Any]) -> dict[str, Any]:
    template = deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{deployment['metadata']['name']}-dry", "namespace": deployment["metadata"]["namespace"],
                         "labels": template["metadata"].get("labels") or {}},
            "spec": template["spec"]}


async def test_member_pods_are_admitted_under_restricted(apiserver: RunningApiServer, tmp_path: Path) -> None:
    assert shutil.which("kubectl"), "kubectl is needed (the Makefile's packages)"
    code, out = await kubectl(apiserver, "apply", "--server-side", "-k", str(DEPLOY / "crds" / "isthmus"))
    assert code == 0, out
    code, out = await kubectl(apiserver, "apply", "-k", str(DEPLOY / "member"))
    assert code == 0, out
    assert "PodSecurity" not in out, out
    code, out = await kubectl(apiserver, "get", "namespace", "isthmus-system", "-o",
                              "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}")
    assert (code, out) == (0, "restricted")

    deployments = [o for o in render(DEPLOY / "member") if o["kind"] == "Deployment"]
    assert len(deployments) >= 5
    for dep in deployments:
        path = tmp_path / f"{dep['metadata']['name']}.json"
        path.write_text(json.dumps(pod_of(dep)))
        code, out = await kubectl(apiserver, "create", "--dry-run=server", "-f", str(path))
        assert code == 0, out
        assert "created (server dry run)" in out and "Warning" not in out, out


async def test_a_pod_beyond_restricted_is_refused_there(apiserver: RunningApiServer, tmp_path: Path) -> None:
    """The test above can fail: the egress gateway on the host network is refused in isthmus-system."""
    code, out = await kubectl(apiserver, "apply", "-k", str(DEPLOY / "member"))
    assert code == 0, out
    gateway = next(o for o in render(DEPLOY / "member")
                   if o["kind"] == "Deployment" and o["metadata"]["name"] == "isthmus-egress-gateway")
    pod = pod_of(gateway)
    pod["spec"]["hostNetwork"] = True
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(pod))
    code, out = await kubectl(apiserver, "create", "--dry-run=server", "-f", str(path))
    assert code == 1, out
    assert 'violates PodSecurity "restricted:v1.32": host namespaces (hostNetwork=true)' in out, out
