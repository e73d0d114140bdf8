"""What a user reads about a ServiceImport's Ready condition (mcs-api v1beta1): `isthmus show imports`
prints a READY column, with the reason when it is not True, and -o json carries the condition."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from isthmus.api.mcs import ServiceImport
from isthmus.kube.helpers import install_crds
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer

ROOT = Path(__file__).resolve().parents[2]
SI = resource_for(ServiceImport)
SI_STATUS: Any = SI.Status  # a namespaced kind: lightkube's types cannot tell from the generic class


async def isthmus(srv: RunningApiServer, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", *args, "--kubeconfig", srv.kubeconfig,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "250"})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def ready(status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-12-01T00:00:00Z"}


async def test_show_imports_prints_ready_with_the_reason_when_not_true(apiserver: RunningApiServer) -> None:
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(Namespace(metadata=ObjectMeta(name="shop")))
    conditions = {
        "cart": ready("True", "Ready", "the import is in place"),
        "db": ready("False", "IPFamilyNotSupported", "IPv6 is not supported by this cluster"),
        "web": None,  # not yet written by the agent
    }
    for name, cond in conditions.items():
        await client.create(SI.from_dict({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"type": "ClusterSetIP", "ips": ["243.0.0.7"], "ports": [{"port": 80, "protocol": "TCP"}]}}))
        if cond is not None:
            await client.patch(SI_STATUS, name, {"status": {"conditions": [cond]}}, namespace="shop",
                               patch_type=PatchType.MERGE)

    rc, out, err = await isthmus(apiserver, "show", "imports", "-n", "shop")
    assert rc == 0, err
    lines = out.splitlines()
    header = lines[0].split()
    assert header[:8] == ["NAMESPACE", "NAME", "TYPE", "VIP", "CLUSTERS", "PORTS", "READY", "CONFLICT"], out
    cells = {line.split()[1]: line.split() for line in lines[1:] if line.strip()}
    assert cells["cart"][6] == "True"
    assert cells["db"][6:8] == ["False", "IPFamilyNotSupported"], out
    assert cells["web"][6] == "-"

    rc, out, err = await isthmus(apiserver, "show", "imports", "-n", "shop", "-o", "json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)["items"]}
    assert rows["db"]["ready"] == {"status": "False", "reason": "IPFamilyNotSupported",
                                   "message": "IPv6 is not supported by this cluster"}
    assert rows["web"]["ready"] is None
