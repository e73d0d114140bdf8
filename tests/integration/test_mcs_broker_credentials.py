"""Per-cluster broker credentials against a real embedded broker with RBAC and admission policies on:
deploy-broker hands out no token, join gives each cluster a ServiceAccount token that writes only
that cluster's objects, leave revokes it; and the CoreDNS stub zone join adds and leave removes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.meta_v1 import ObjectMeta as LkMeta
from lightkube.resources.authentication_v1 import SelfSubjectReview
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret, Service, ServiceAccount
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding
from lightkube.types import PatchType

from isthmus.api.mcs import (
    AGENT_NAMESPACE,
    BROKER_MEMBER_ROLE,
    BROKER_MEMBER_WRITES_POLICY,
    DNS_SERVICE_NAME,
    SOURCE_CLUSTER_LABEL,
    Cluster,
)
from isthmus.clusterset import broker, membership
from isthmus.clusterset.brokerinfo import BrokerInfo
from isthmus.clusterset.control import ClustersetError
from isthmus.discovery import coredns
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer
from tests.unit.test_coredns import KUBEADM

pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(120)]

NS = "isthmus-broker"
ADMIN_TOKEN = "broker-admin-token"
KUBEADM_COREFILE = KUBEADM  # kubeadm's default Corefile


@dataclass
class Env:
    broker: RunningApiServer
    admin: AsyncClient
    info: BrokerInfo
    members: dict[str, AsyncClient]
    servers: list[RunningApiServer]
    tmp: Path

    async def join(self, cid: str) -> BrokerInfo:
        """Join a new member as `cid` with the admin credentials; the broker-info it stored."""
        srv = RunningApiServer(self.tmp / cid, bookmark_interval=1.0)
        await srv.start()
        self.servers.append(srv)
        client = srv.client()
        self.members[cid] = client
        await membership.join(self.admin, client, self.info, cluster_id=cid, enable_clusterset_ip=None,
                              clusterset_ip_cidr=None, force=False, member_credentials=True)
        _, stored = await membership.membership(client)
        return stored


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    srv = RunningApiServer(tmp_path / "broker", bookmark_interval=1.0, token=ADMIN_TOKEN)
    await srv.start()
    admin = srv.client()
    info = await broker.deploy_broker(admin, namespace=NS, enable_clusterset_ip=False, cidr_range=None,
                                      server_url=srv.url, ca_pem=None)
    e = Env(srv, admin, info, {}, [], tmp_path)
    try:
        yield e
    finally:
        for s in e.servers:
            await s.close()
        await srv.close()


def _slice(name: str, cluster: str) -> EndpointSlice:
    return EndpointSlice(metadata=LkMeta(name=name, namespace=NS, labels={SOURCE_CLUSTER_LABEL: cluster}),
                         addressType="IPv4", endpoints=[])


async def _refused(call: Any) -> str:
    with pytest.raises(ApiError) as exc:
        await call
    assert exc.value.status.code == 403, exc.value.status
    return str(exc.value.status.message)


async def test_deploy_broker_hands_out_no_token_and_installs_the_member_role_and_policy(env: Env) -> None:
    assert env.info.token is None and "token" not in env.info.to_dict()
    role = await env.admin.get(Role, BROKER_MEMBER_ROLE, namespace=NS)
    granted = {(g, r): set(rule.verbs) for rule in role.rules or [] for g in rule.apiGroups or []
               for r in rule.resources or []}
    assert granted[("isthmus.io", "clusters")] == {"get", "list", "watch"}
    assert granted[("discovery.k8s.io", "endpointslices")] >= {"create", "update", "patch", "delete"}
    # Broker tenancy: nothing shared is writable by a member (no ServiceImports at all, the
    # MultiClusterServices' status is the broker controller's); its own reports are.
    assert not any(g == "multicluster.x-k8s.io" for g, _ in granted)
    assert granted[("isthmus.io", "multiclusterservicereports")] >= {"create", "update", "patch", "delete"}
    assert not any(r == "secrets" for _, r in granted)
    configmaps = next(rule for rule in role.rules or [] if "configmaps" in (rule.resources or []))
    assert configmaps.resourceNames == ["broker-info"] and configmaps.verbs == ["get"]
    from lightkube.resources.admissionregistration_v1 import (
        ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding,
    )

    policy = await env.admin.get(ValidatingAdmissionPolicy, BROKER_MEMBER_WRITES_POLICY)
    assert policy.spec.failurePolicy == "Fail"
    binding = await env.admin.get(ValidatingAdmissionPolicyBinding, BROKER_MEMBER_WRITES_POLICY)
    assert binding.spec.policyName == BROKER_MEMBER_WRITES_POLICY and binding.spec.validationActions == ["Deny"]


async def test_join_gives_the_cluster_its_own_service_account_and_token(env: Env) -> None:
    stored = await env.join("c1")
    assert stored.token and stored.server == env.info.server and stored.namespace == NS
    await env.admin.get(ServiceAccount, "cluster-c1", namespace=NS)
    own = await env.admin.get(Role, "isthmus-cluster-c1", namespace=NS)
    assert [(r.resources, r.resourceNames, sorted(r.verbs)) for r in own.rules or []] == [
        (["clusters", "clusters/status"], ["c1"], ["get", "patch", "update"])]
    for name, role in (("isthmus-cluster-c1", "isthmus-cluster-c1"), ("isthmus-broker-member-c1", BROKER_MEMBER_ROLE)):
        rb = await env.admin.get(RoleBinding, name, namespace=NS)
        assert rb.roleRef.name == role and rb.roleRef.kind == "Role"
        assert [(s.kind, s.name, s.namespace) for s in rb.subjects or []] == [("ServiceAccount", "cluster-c1", NS)]
    member = stored.client()
    try:
        review = await member.create(SelfSubjectReview())
        assert review.status.userInfo.username == f"system:serviceaccount:{NS}:cluster-c1"
    finally:
        await member.close()
    # Re-running join renews the token (a new one) and keeps the ServiceAccount.
    uid = (await env.admin.get(ServiceAccount, "cluster-c1", namespace=NS)).metadata.uid
    await membership.join(env.admin, env.members["c1"], env.info, cluster_id="c1", enable_clusterset_ip=None,
                          clusterset_ip_cidr=None, force=False, member_credentials=True)
    _, renewed = await membership.membership(env.members["c1"])
    assert renewed.token and renewed.token != stored.token
    assert (await env.admin.get(ServiceAccount, "cluster-c1", namespace=NS)).metadata.uid == uid


async def test_a_member_token_writes_only_its_own_objects(env: Env) -> None:
    c1 = (await env.join("c1")).client()
    await env.join("c2")
    try:
        # Its own slice: create, update, delete.
        await c1.create(_slice("web-shop-c1", "c1"))
        await c1.patch(EndpointSlice, "web-shop-c1", {"metadata": {"labels": {"extra": "x"}}}, namespace=NS)
        # Another cluster's, or relabelling its own as another's: the policy refuses, as kube words it.
        message = await _refused(c1.create(_slice("web-shop-c2", "c2")))
        assert message == (
            'endpointslices.discovery.k8s.io "web-shop-c2" is forbidden: ValidatingAdmissionPolicy '
            f"'{BROKER_MEMBER_WRITES_POLICY}' with binding '{BROKER_MEMBER_WRITES_POLICY}' denied request: "
            "a member cluster may only write its own objects (label multicluster.kubernetes.io/source-cluster "
            "must name it)")
        await _refused(c1.patch(EndpointSlice, "web-shop-c1", {"metadata": {"labels": {SOURCE_CLUSTER_LABEL: "c2"}}},
                                namespace=NS))
        # No label at all: the same denial and message, not an evaluation error.
        unlabelled = EndpointSlice(metadata=LkMeta(name="nolabel", namespace=NS), addressType="IPv4", endpoints=[])
        assert (await _refused(c1.create(unlabelled))).endswith(message.split("denied request: ")[1])
        await env.admin.create(_slice("web-shop-c2", "c2"))
        await _refused(c1.delete(EndpointSlice, "web-shop-c2", namespace=NS))
        await c1.delete(EndpointSlice, "web-shop-c1", namespace=NS)

        # Its own Cluster's heartbeat and status; not another's, and no Cluster create or delete.
        cluster = resource_for(Cluster)
        await c1.patch(cluster, "c1", {"metadata": {"annotations": {"isthmus.io/heartbeat": "now"}}},
                       namespace=NS, patch_type=PatchType.MERGE)
        await c1.patch(cluster.Status, "c1", {"status": {"conditions": []}}, namespace=NS, patch_type=PatchType.MERGE)
        # ... but not the spec join set (its ID and VIP CIDR, which later joins plan around).
        message = await _refused(c1.patch(cluster, "c1", {"spec": {"clustersetIPCIDR": ["243.2.0.0/16"]}},
                                          namespace=NS, patch_type=PatchType.MERGE))
        assert message.endswith("a member cluster may not change a Cluster's spec (set by isthmus join with the "
                                "broker's admin credentials)"), message
        message = await _refused(c1.patch(cluster.Status, "c2", {"status": {"conditions": []}}, namespace=NS,
                                          patch_type=PatchType.MERGE))
        assert message == (
            f'clusters.isthmus.io "c2" is forbidden: User "system:serviceaccount:{NS}:cluster-c1" cannot patch '
            f'resource "clusters/status" in API group "isthmus.io" in the namespace "{NS}"')
        await _refused(c1.patch(cluster, "c2", {"metadata": {"annotations": {"x": "y"}}}, namespace=NS,
                                patch_type=PatchType.MERGE))
        await _refused(c1.delete(cluster, "c1", namespace=NS))
        await _refused(c1.create(cluster.from_dict({"metadata": {"name": "c9", "namespace": NS},
                                                    "spec": {"clusterID": "c9"}})))
        # It reads the clusterset, never Secrets.
        names = [o.metadata.name async for o in c1.list(cluster, namespace=NS)]
        assert sorted(names) == ["c1", "c2"]
        await c1.get(ConfigMap, "broker-info", namespace=NS)
        async def list_secrets() -> list[Any]:
            return [s async for s in c1.list(Secret, namespace=NS)]

        message = await _refused(list_secrets())
        assert message == (f'secrets is forbidden: User "system:serviceaccount:{NS}:cluster-c1" cannot list '
                           f'resource "secrets" in API group "" in the namespace "{NS}"')
        await _refused(c1.get(Secret, "anything", namespace=NS))
    finally:
        await c1.close()


async def test_leave_revokes_the_token(env: Env) -> None:
    stored = await env.join("c1")
    member = stored.client()
    try:
        await member.get(resource_for(Cluster), "c1", namespace=NS)
        result = await membership.leave(env.admin, env.members["c1"], NS, "c1")
        assert result.deregistered and result.revoked
        with pytest.raises(ApiError) as exc:
            await member.get(ConfigMap, "broker-info", namespace=NS)
        assert exc.value.status.code == 401 and exc.value.status.message == "Unauthorized"
        for res, name in ((ServiceAccount, "cluster-c1"), (Role, "isthmus-cluster-c1"),
                          (RoleBinding, "isthmus-cluster-c1"), (RoleBinding, "isthmus-broker-member-c1")):
            with pytest.raises(ApiError):
                await env.admin.get(res, name, namespace=NS)
    finally:
        await member.close()


async def test_a_member_token_may_neither_join_others_nor_leave(env: Env) -> None:
    stored = await env.join("c1")
    member = stored.client()
    try:
        srv = RunningApiServer(env.tmp / "other", bookmark_interval=1.0)
        await srv.start()
        env.servers.append(srv)
        with pytest.raises(ClustersetError, match="pass the broker's admin kubeconfig as --broker-kubeconfig"):
            await membership.join(member, srv.client(), env.info, cluster_id="c7", enable_clusterset_ip=None,
                                  clusterset_ip_cidr=None, force=False, member_credentials=True)
        with pytest.raises(ClustersetError, match=r"may not remove cluster .c1.*--broker-kubeconfig"):
            await membership.leave(member, None, NS, "c1")
    finally:
        await member.close()


async def test_join_and_leave_edit_the_coredns_corefile(env: Env) -> None:
    srv = RunningApiServer(env.tmp / "dns-member", bookmark_interval=1.0)
    await srv.start()
    env.servers.append(srv)
    client = srv.client()
    # Before deploy/member is applied there is no DNS Service: a note, nothing changed.
    await client.create(ConfigMap(metadata=LkMeta(name="coredns", namespace="kube-system"),
                                  data={"Corefile": KUBEADM_COREFILE}))
    note = await coredns.ensure_coredns_stub(client)
    assert note.startswith(f"CoreDNS not configured: no Service {AGENT_NAMESPACE}/{DNS_SERVICE_NAME}")
    await client.create(Namespace(metadata=LkMeta(name=AGENT_NAMESPACE)))
    svc = await client.create(Service(
        metadata=LkMeta(name=DNS_SERVICE_NAME, namespace=AGENT_NAMESPACE),
        spec=ServiceSpec(clusterIP="10.96.0.53", ports=[ServicePort(name="dns", port=53, protocol="UDP")],
                         selector={"app": "dns"})))
    ip = svc.spec.clusterIP
    assert ip
    assert await coredns.ensure_coredns_stub(client) == f"CoreDNS forwards clusterset.local to " \
        f"{AGENT_NAMESPACE}/{DNS_SERVICE_NAME} ({ip})"
    corefile = (await client.get(ConfigMap, "coredns", namespace="kube-system")).data["Corefile"]
    assert KUBEADM_COREFILE in corefile and corefile != KUBEADM_COREFILE
    assert f"clusterset.local:53 {{\n    forward . {ip}:53\n}}" in corefile
    await coredns.ensure_coredns_stub(client)  # idempotent
    assert (await client.get(ConfigMap, "coredns", namespace="kube-system")).data["Corefile"] == corefile
    assert await coredns.remove_coredns_stub(client) == "CoreDNS no longer forwards clusterset.local"
    assert (await client.get(ConfigMap, "coredns", namespace="kube-system")).data["Corefile"] == KUBEADM_COREFILE


async def test_broker_info_of_an_old_broker_with_a_token_still_decodes() -> None:
    old = BrokerInfo(server="https://b:6443", token="legacy").encode()
    assert BrokerInfo.decode(old).token == "legacy"
    assert base64.b64decode(old)  # plain base64 of JSON, as before


async def test_the_join_and_leave_commands_edit_corefile_and_credentials(env: Env) -> None:
    """`isthmus join --broker-kubeconfig` / `isthmus leave --broker-kubeconfig` as a user runs them."""
    from typer.testing import CliRunner

    from isthmus.cli.main import app

    srv = RunningApiServer(env.tmp / "cli-member", bookmark_interval=1.0)
    await srv.start()
    env.servers.append(srv)
    client = srv.client()
    await client.create(ConfigMap(metadata=LkMeta(name="coredns", namespace="kube-system"),
                                  data={"Corefile": KUBEADM_COREFILE}))
    await client.create(Namespace(metadata=LkMeta(name=AGENT_NAMESPACE)))
    await client.create(Service(
        metadata=LkMeta(name=DNS_SERVICE_NAME, namespace=AGENT_NAMESPACE),
        spec=ServiceSpec(clusterIP="10.96.0.53", ports=[ServicePort(name="dns", port=53, protocol="UDP")])))
    info_file = env.tmp / "broker-info.subm"
    info_file.write_text(env.info.encode())

    def cli(*args: str) -> str:
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, (result.output, result.stderr)
        return result.output

    out = await asyncio.to_thread(cli, "join", str(info_file), "--kubeconfig", srv.kubeconfig, "--cluster-id", "c5",
                                  "--broker-kubeconfig", env.broker.kubeconfig)
    assert f"broker credentials: ServiceAccount {NS}/cluster-c5" in out
    assert "CoreDNS forwards clusterset.local to isthmus-system/isthmus-dns (10.96.0.53)" in out
    corefile = (await client.get(ConfigMap, "coredns", namespace="kube-system")).data["Corefile"]
    assert "clusterset.local:53 {\n    forward . 10.96.0.53:53\n}" in corefile
    _, stored = await membership.membership(client)
    assert stored.token

    out = await asyncio.to_thread(cli, "leave", "--kubeconfig", srv.kubeconfig, "--broker-kubeconfig",
                                  env.broker.kubeconfig, "--yes")
    assert "cluster c5 left the clusterset: removed from the broker; its broker credentials revoked" in out
    assert "CoreDNS no longer forwards clusterset.local" in out
    assert (await client.get(ConfigMap, "coredns", namespace="kube-system")).data["Corefile"] == KUBEADM_COREFILE
    member = stored.client()
    try:
        with pytest.raises(ApiError) as exc:
            await member.get(ConfigMap, "broker-info", namespace=NS)
        assert exc.value.status.code == 401
    finally:
        await member.close()


async def test_an_agent_whose_token_is_revoked_stops_to_read_its_secret_again(env: Env) -> None:
    from isthmus.discovery.agent import Agent, BrokerCredentialsRejected

    await env.join("c1")
    agent = await Agent.from_cluster(env.members["c1"], None, dead_cluster_grace=2.0)
    assert agent.cluster_id == "c1"  # no --cluster-id: the one join stored
    task = asyncio.create_task(agent.run())
    try:
        async with asyncio.timeout(30):
            await agent.wait_ready()
        await env.admin.delete(ServiceAccount, "cluster-c1", namespace=NS)  # what leave does
        with pytest.raises(BrokerCredentialsRejected, match=r"rejects this cluster's token \(401 Unauthorized\)"):
            async with asyncio.timeout(15):
                await task
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await agent.broker.close()
