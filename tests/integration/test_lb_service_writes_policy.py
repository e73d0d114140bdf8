"""The lb translator's cluster-wide Service rights under deploy/member/lb's admission policy, on an
apiserver enforcing RBAC and ValidatingAdmissionPolicy: it writes the status and annotation of
LoadBalancer Services of its class (or class-less), never a Service another load balancer owns or
one of another type (issue 43's review: lb's `services/status` was any Service in the cluster)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Service
from lightkube.types import PatchType

from tests.harness.apiserver import installed_as
from tests.harness.lb import lb_overlay

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

STATUS = {"status": {"loadBalancer": {"ingress": [{"ip": "127.30.1.1"}]}}}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[AsyncClient, AsyncClient]]:
    """(admin, the translator's own client) with deploy/member and the lb component installed."""
    async with installed_as(tmp_path, lb_overlay(tmp_path / "overlay"), "isthmus-system", "isthmus-lb") as pair:
        yield pair


def service(name: str, **spec: Any) -> Service:
    return Service.from_dict({"metadata": {"name": name, "namespace": "default"},
                              "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]} | spec})


async def test_the_translator_writes_only_load_balancers_of_its_class(cluster: tuple[AsyncClient, AsyncClient]) -> None:
    admin, lb = cluster
    await admin.create(service("ours", loadBalancerClass="isthmus.io/edgelb"))
    await admin.create(service("classless"))
    await admin.create(service("cilium", loadBalancerClass="io.cilium/l2-announcer"))
    await admin.create(Service.from_dict({"metadata": {"name": "plain", "namespace": "default"},
                                          "spec": {"ports": [{"port": 80}]}}))
    for name in ("ours", "classless"):
        await lb.patch(Service.Status, name, STATUS, namespace="default", patch_type=PatchType.MERGE)
        await lb.patch(Service, name, {"metadata": {"annotations": {"a": "b"}}}, namespace="default",
                       patch_type=PatchType.MERGE)
    for name in ("cilium", "plain"):
        for res, body in ((Service.Status, STATUS), (Service, {"metadata": {"annotations": {"a": "b"}}})):
            with pytest.raises(ApiError) as denied:
                await lb.patch(res, name, body, namespace="default", patch_type=PatchType.MERGE)
            assert denied.value.status.code == 403
            assert "the lb translator may only update LoadBalancer Services of class isthmus.io/edgelb" in str(
                denied.value.status.message)
    cilium = await admin.get(Service, "cilium", namespace="default")
    assert cilium.status is None or not (cilium.status.loadBalancer and cilium.status.loadBalancer.ingress)
