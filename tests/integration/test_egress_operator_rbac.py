"""The egress operator under deploy/member's RBAC and its admission policy, on an apiserver that
enforces both: it does its job as its own ServiceAccount (forwarder Deployment and its
PodDisruptionBudget, Services and EndpointSlice, external-services made with Pod Security labels),
and its cluster-wide rights reach nothing else: another namespace's Service, an object it does not
manage, a Deployment running as another Isthmus account or mounting a volume, a budget over other
pods or in another namespace, another namespace (issue 43's review)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from isthmus.api.egress import ExternalService, SourceIPClaim, SourceIPClass
from isthmus.egress.operator import EgressOperator
from isthmus.kube.manifests import deploy_dir
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import installed_as
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

NS = "isthmus-system"
OPERATOR = "system:serviceaccount:isthmus-system:isthmus-egress-operator"
OWN = {"app.kubernetes.io/managed-by": "isthmus-egress"}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[AsyncClient, AsyncClient]]:
    """(admin, the egress operator's own client) on an RBAC-enforcing apiserver with deploy/member."""
    async with installed_as(tmp_path, deploy_dir() / "member", NS, "isthmus-egress-operator") as pair:
        yield pair


async def refused(call: Any) -> str:
    with pytest.raises(ApiError) as denied:
        await call
    assert denied.value.status.code == 403, denied.value.status
    return str(denied.value.status.message)


async def test_the_operator_publishes_a_forwarder_as_itself(cluster: tuple[AsyncClient, AsyncClient]) -> None:
    admin, client = cluster
    op = EgressOperator(client, identity="test", lease_duration=3.0, renew_deadline=2.0, retry_period=0.5)
    task = asyncio.create_task(op.run())
    try:
        await eventually(lambda: asyncio.sleep(0, op.ready), 20, "operator leading")
        await admin.create(resource_for(SourceIPClass).from_dict({
            "metadata": {"name": "lab"},
            "spec": {"ranges": [{"start": "127.32.9.1", "end": "127.32.9.2"}], "allowedNamespaces": ["default"]}}))
        await admin.create(resource_for(SourceIPClaim).from_dict({
            "metadata": {"name": "db", "namespace": "default"}, "spec": {"sourceIPClassName": "lab"}}))
        await admin.create(resource_for(ExternalService).from_dict({
            "metadata": {"name": "pg", "namespace": "default"},
            "spec": {"targetIP": "127.48.0.10", "sources": [{"service": {"name": "app"}, "sourceIPClaimName": "db"}],
                     "ports": [{"port": 5432}]}}))

        async def published() -> Service | None:
            with contextlib.suppress(ApiError):
                return await admin.get(Service, "pg", namespace="external-services")
            return None

        svc = await eventually(published, 30, "Service pg.external-services")
        assert svc.metadata is not None and svc.metadata.labels is not None
        assert svc.metadata.labels["app.kubernetes.io/managed-by"] == "isthmus-egress"
        deployments = [d async for d in admin.list(Deployment, namespace=NS,
                                                   labels={"app.kubernetes.io/managed-by": "isthmus-egress"})]
        assert [d.spec.template.spec.serviceAccountName for d in deployments] == ["isthmus-egress-forwarder"]
        ns = await admin.get(Namespace, "external-services")
        assert ns.metadata is not None and ns.metadata.labels is not None
        assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"

        # Two forwarder pods under a budget that lets a drain take one at a time.
        (dep,) = deployments
        assert dep.metadata is not None and dep.metadata.name is not None and dep.spec is not None
        assert dep.spec.replicas == 2
        workload = dep.metadata.name

        # The public EndpointSlice mirrors the forwarder pods' endpoints with their conditions: one in its
        # lame duck (serving, terminating) stays the proxies' fallback if no forwarder is ready.
        await admin.create(EndpointSlice.from_dict({
            "metadata": {"name": f"{workload}-abc", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": workload}},
            "addressType": "IPv4", "ports": [],
            "endpoints": [{"addresses": ["127.33.0.2"], "conditions": {"ready": True, "serving": True,
                                                                       "terminating": False}},
                          {"addresses": ["127.33.0.3"], "conditions": {"ready": False, "serving": True,
                                                                       "terminating": True}}]}))

        async def mirrored() -> list[Any] | None:
            with contextlib.suppress(ApiError):
                sl = (await admin.get(EndpointSlice, "pg-forwarder", namespace="external-services")).to_dict()
                got = [(e["addresses"], e.get("conditions")) for e in sl.get("endpoints") or []]
                return got if len(got) == 2 else None
            return None

        assert await eventually(mirrored, 30, "the forwarders mirrored into external-services") == [
            (["127.33.0.2"], {"ready": True, "serving": True, "terminating": False}),
            (["127.33.0.3"], {"ready": False, "serving": True, "terminating": True})]

        async def budget() -> PodDisruptionBudget | None:
            with contextlib.suppress(ApiError):
                return await admin.get(PodDisruptionBudget, workload, namespace=NS)
            return None

        pdb = await eventually(budget, 30, "the forwarder's PodDisruptionBudget")
        assert pdb.metadata is not None and pdb.spec is not None and pdb.spec.selector is not None
        assert pdb.metadata.labels == dep.metadata.labels
        assert pdb.spec.maxUnavailable == 1
        assert pdb.spec.selector.matchLabels == dep.spec.selector.matchLabels
        # It follows the ExternalService: deleted by hand, it comes back; the ExternalService gone, so is it.
        await admin.delete(PodDisruptionBudget, workload, namespace=NS)
        await eventually(budget, 30, "the budget made again")
        await admin.delete(resource_for(ExternalService), "pg", namespace="default")

        async def gone() -> bool:
            names = [p.metadata.name async for p in admin.list(PodDisruptionBudget, namespace=NS)
                     if p.metadata is not None]
            deps = [d async for d in admin.list(Deployment, namespace=NS, labels={**OWN})]
            return workload not in names and not deps

        await eventually(gone, 30, "the forwarder's Deployment and budget removed")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_its_cluster_wide_rights_reach_only_its_own_objects(cluster: tuple[AsyncClient, AsyncClient]) -> None:
    admin, client = cluster
    await admin.create(Service.from_dict({"metadata": {"name": "web", "namespace": "default"},
                                          "spec": {"ports": [{"port": 80}]}}))
    message = await refused(client.patch(Service, "web", {"metadata": {"labels": OWN}}, namespace="default",
                                         patch_type=PatchType.MERGE))
    assert "the egress operator may write only its own objects" in message
    await refused(client.delete(Service, "kubernetes", namespace="default"))
    # Its own namespace, but not its object: isthmus-dns is the DNS server's Service.
    await refused(client.patch(Service, "isthmus-dns", {"metadata": {"labels": {"x": "y"}}}, namespace=NS,
                               patch_type=PatchType.MERGE))
    slice_ = {"metadata": {"name": "stolen", "namespace": "default", "labels": OWN}, "addressType": "IPv4",
              "endpoints": [], "ports": []}
    await refused(client.create(EndpointSlice.from_dict(slice_)))
    message = await refused(client.create(Namespace(metadata=ObjectMeta(name="anything"))))
    assert "the egress operator may create namespace external-services only" in message


def forwarder_like(name: str, **pod: Any) -> dict[str, Any]:
    spec = {"serviceAccountName": "isthmus-egress-forwarder",
            "containers": [{"name": "forwarder", "image": "isthmus"}]} | pod
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "labels": OWN},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


async def test_its_deployments_run_as_the_forwarder_account_only(cluster: tuple[AsyncClient, AsyncClient]) -> None:
    _admin, client = cluster

    async def write(body: dict[str, Any]) -> Any:
        return await client.apply(Deployment.from_dict(body), field_manager="isthmus-egress-operator", force=True)

    await write(forwarder_like("ok"))
    message = await refused(write(forwarder_like("as-agent", serviceAccountName="isthmus-agent")))
    assert "runs as ServiceAccount isthmus-egress-forwarder" in message
    await refused(write(forwarder_like("with-secret", volumes=[
        {"name": "t", "secret": {"secretName": "isthmus-broker"}}])))
    await refused(write(forwarder_like("on-host", hostNetwork=True)))
    # The agent's Deployment is not the operator's to patch, even to add the label.
    await refused(client.patch(Deployment, "isthmus-agent", {"metadata": {"labels": OWN}}, namespace=NS,
                               patch_type=PatchType.MERGE))


def budget_like(name: str, namespace: str = NS, selector: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "labels": OWN},
            "spec": {"maxUnavailable": 1,
                     "selector": {"matchLabels": selector or {"egress.isthmus.io/forwarder": name}}}}


async def test_its_budgets_cover_its_forwarders_only(cluster: tuple[AsyncClient, AsyncClient]) -> None:
    admin, client = cluster

    async def write(body: dict[str, Any]) -> Any:
        return await client.apply(PodDisruptionBudget.from_dict(body), field_manager="isthmus-egress-operator",
                                  force=True)

    await write(budget_like("ok"))
    await client.delete(PodDisruptionBudget, "ok", namespace=NS)
    # A budget over another component's pods (maxUnavailable 0 would block every drain of their nodes).
    message = await refused(write(budget_like("dns", selector={"app.kubernetes.io/name": "isthmus-dns"})))
    assert "selects forwarder pods" in message
    # Not in another namespace, even with a forwarder selector.
    await admin.create(Namespace(metadata=ObjectMeta(name="shop")))
    await refused(write(budget_like("fwd", namespace="shop")))
    # DNS's own budget (deploy/member) is not the operator's to change or delete.
    await refused(client.patch(PodDisruptionBudget, "isthmus-dns", {"metadata": {"labels": OWN}}, namespace=NS,
                               patch_type=PatchType.MERGE))
    await refused(client.delete(PodDisruptionBudget, "isthmus-dns", namespace=NS))
