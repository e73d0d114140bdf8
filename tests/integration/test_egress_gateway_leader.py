"""The egress gateway labels the leader's Pod (issue 43, defect 4 done right), as its own
ServiceAccount under deploy/member's RBAC and admission policy: it labels its Pod leader once
programmed, clears a previous leader's label, removes its own when it stops, and may change nothing
else of any Pod (another label, an annotation, the spec, a Pod of another Deployment)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from isthmus.api.egress import GATEWAY_LEADER_LABEL, GATEWAY_LEASE, POD_DELETION_COST
from isthmus.egress.gateway import GatewayRuntime
from isthmus.kube.helpers import install_crds
from isthmus.kube.manifests import apply, deploy_dir, render
from tests.harness.apiserver import RunningApiServer, installed_as
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

NS = "isthmus-system"


def gateway_template() -> dict[str, Any]:
    dep = next(o for o in render(deploy_dir() / "member")
               if o["kind"] == "Deployment" and o["metadata"]["name"] == "isthmus-egress-gateway")
    return dict(dep["spec"]["template"])


def pod(name: str, *, leader: bool = False, app: str = "isthmus-egress-gateway") -> dict[str, Any]:
    tpl = gateway_template()
    labels = {**tpl["metadata"]["labels"], "app.kubernetes.io/name": app, "pod-template-hash": "abc"}
    annotations = dict(tpl["metadata"].get("annotations") or {})
    if leader:
        labels[GATEWAY_LEADER_LABEL] = "true"
        annotations[POD_DELETION_COST] = "1"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
            "spec": tpl["spec"]}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[AsyncClient, AsyncClient]]:
    """(admin, the gateway's own client) on an RBAC-enforcing apiserver with deploy/member."""
    async with installed_as(tmp_path, deploy_dir() / "member", NS, "isthmus-egress-gateway") as pair:
        yield pair


async def _meta(admin: AsyncClient, name: str) -> tuple[dict[str, str], dict[str, str]]:
    meta = (await admin.get(Pod, name, namespace=NS)).to_dict()["metadata"]
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


async def refused(call: Any) -> str:
    with pytest.raises(ApiError) as denied:
        await call
    assert denied.value.status.code == 403, denied.value.status
    return str(denied.value.status.message)


async def test_the_leader_labels_its_pod_clears_a_stale_leader_and_unlabels_on_stop(
        cluster: tuple[AsyncClient, AsyncClient]) -> None:
    admin, client = cluster
    await admin.create(Pod.from_dict(pod("gw-old", leader=True)))  # a leader cut off before it could unlabel
    await admin.create(Pod.from_dict(pod("gw-new")))
    relay_ip = f"127.77.{random.randint(1, 250)}.{random.randint(2, 250)}"
    gw = GatewayRuntime(client, namespace=NS, identity="gw-new", relay_ip=relay_ip, lease_duration=3.0,
                        renew_deadline=2.0, retry_period=0.5, acquire_period=0.1, pod_name="gw-new")
    task = asyncio.create_task(gw.run())
    try:
        async def labelled() -> bool:
            new, old = await _meta(admin, "gw-new"), await _meta(admin, "gw-old")
            return (new[0].get(GATEWAY_LEADER_LABEL) == "true" and new[1].get(POD_DELETION_COST) == "1"
                    and GATEWAY_LEADER_LABEL not in old[0] and POD_DELETION_COST not in old[1])

        await eventually(labelled, 20, "gw-new labelled leader, gw-old's label cleared")
        assert gw.ready
        old_labels, old_annotations = await _meta(admin, "gw-old")
        assert old_labels["app.kubernetes.io/name"] == "isthmus-egress-gateway"  # nothing else touched
        assert old_annotations["prometheus.io/scrape"] == "true"
    finally:
        await gw.stop() if gw.manager._task is not None else None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    labels, annotations = await _meta(admin, "gw-new")
    assert GATEWAY_LEADER_LABEL not in labels and POD_DELETION_COST not in annotations
    lease = (await admin.get(Lease, GATEWAY_LEASE, namespace=NS)).to_dict()
    assert not lease["spec"].get("holderIdentity"), lease  # handed back after the label went


async def test_the_gateway_may_change_only_the_leader_label_of_its_own_pods(
        cluster: tuple[AsyncClient, AsyncClient]) -> None:
    admin, client = cluster
    await admin.create(Pod.from_dict(pod("gw-a")))
    await admin.create(Pod.from_dict(pod("agent-a", app="isthmus-agent")))

    def patch(name: str, body: dict[str, Any]) -> Any:
        return client.patch(Pod, name, body, namespace=NS, patch_type=PatchType.MERGE)

    await patch("gw-a", {"metadata": {"labels": {GATEWAY_LEADER_LABEL: "true"},
                                      "annotations": {POD_DELETION_COST: "1"}}})
    await patch("gw-a", {"metadata": {"labels": {GATEWAY_LEADER_LABEL: None}, "annotations": {POD_DELETION_COST: None}}})
    assert [p.metadata.name async for p in client.list(Pod, namespace=NS,
                                                        labels={"app.kubernetes.io/name": "isthmus-egress-gateway"})] \
        == ["gw-a"]
    msg = await refused(patch("gw-a", {"metadata": {"labels": {"app.kubernetes.io/version": "evil"}}}))
    assert "may change only the label egress.isthmus.io/leader" in msg, msg
    msg = await refused(patch("gw-a", {"metadata": {"labels": {GATEWAY_LEADER_LABEL: "yes"}}}))
    assert "may change only the label egress.isthmus.io/leader" in msg, msg
    msg = await refused(patch("gw-a", {"metadata": {"labels": {"app.kubernetes.io/name": "isthmus-agent"}}}))
    assert "may change only the label" in msg, msg
    msg = await refused(patch("gw-a", {"metadata": {"annotations": {"prometheus.io/scrape": "false"}}}))
    assert "may change only the annotation controller.kubernetes.io/pod-deletion-cost" in msg, msg
    msg = await refused(patch("gw-a", {"metadata": {"annotations": {POD_DELETION_COST: "1000"}}}))
    assert "pod-deletion-cost" in msg, msg
    msg = await refused(patch("gw-a", {"spec": {"activeDeadlineSeconds": 5}}))
    assert "may not change a Pod's spec" in msg, msg
    msg = await refused(patch("agent-a", {"metadata": {"labels": {GATEWAY_LEADER_LABEL: "true"}}}))
    assert "only Pods of its own Deployment" in msg, msg
    msg = await refused(client.delete(Pod, "gw-a", namespace=NS))
    assert "cannot delete resource" in msg, msg
    labels, _ = await _meta(admin, "agent-a")
    assert GATEWAY_LEADER_LABEL not in labels


async def test_the_manifests_gateway_replicas_are_both_ready_and_the_service_names_the_leader(tmp_path: Path) -> None:
    """deploy/member's gateway objects on kube-lite, the gateway Pods as processes of the image with
    their own ServiceAccount's token (RBAC and the admission policy enforced): both replicas ready,
    the Deployment Available, exactly one Pod labelled leader and the Service's EndpointSlice naming
    it; the leader deleted (SIGTERM), the other replica takes the label and the Service follows."""
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.discovery_v1 import EndpointSlice

    from tests.integration.test_kubelite_processes import ProcLite

    run = RunningApiServer(tmp_path / "apiserver", token="admin-token", tls=True, bookmark_interval=1.0)
    await run.start()
    client = run.client()
    lite = ProcLite(client, tmp_path / "kubelet", run.server.port)
    await lite.start()
    try:
        async with asyncio.timeout(60):
            await install_crds(client)
            objs = [o for o in render(deploy_dir() / "member") if o["kind"] == "Namespace" or (
                (o["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == "isthmus-egress-gateway")]
            assert {o["kind"] for o in objs} >= {"Deployment", "Service", "PodDisruptionBudget", "Role",
                                                 "ValidatingAdmissionPolicy"}
            await apply(client, objs, field_manager="isthmus-test")

        async def pods() -> list[dict[str, Any]]:
            return [p.to_dict() async for p in client.list(Pod, namespace=NS)
                    if not p.metadata.deletionTimestamp]  # type: ignore[union-attr]

        def is_ready(p: dict[str, Any]) -> bool:
            return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])

        async def settled(exclude: str = "") -> tuple[str, str] | None:
            """(leader's name, its IP) once two ready replicas (none `exclude`) have one leader that the
            Service's slice names alone."""
            live = [p for p in await pods() if p["metadata"]["name"] != exclude]
            leaders = [p for p in live if (p["metadata"].get("labels") or {}).get(GATEWAY_LEADER_LABEL) == "true"]
            if len(live) != 2 or not all(is_ready(p) for p in live) or len(leaders) != 1:
                return None
            ips = [ep["addresses"][0] for s in [s.to_dict() async for s in client.list(
                EndpointSlice, namespace=NS, labels={"kubernetes.io/service-name": "isthmus-egress-gateway"})]
                for ep in s.get("endpoints") or [] if ep["conditions"].get("ready")]
            leader = leaders[0]
            return (leader["metadata"]["name"], leader["status"]["podIP"]) if ips == [leader["status"]["podIP"]] else None

        name, _ip = await eventually(settled, 60, "two ready gateway replicas, the Service naming the labelled leader")
        async def available() -> dict[str, Any] | None:  # the Deployment's status follows its Pods a moment later
            deploy = (await client.get(Deployment, "isthmus-egress-gateway", namespace=NS)).to_dict()
            conds = {c["type"]: c["status"] for c in (deploy.get("status") or {}).get("conditions") or []}
            return deploy if conds.get("Available") == "True" and deploy["status"].get("availableReplicas") == 2 else None

        await eventually(available, 30, "the gateway Deployment Available with both replicas")
        await client.delete(Pod, name, namespace=NS)
        new_name, _ = await eventually(lambda: settled(exclude=name), 60, "another replica labelled leader")
        assert new_name != name
    finally:
        await lite.stop()
        await run.close()
