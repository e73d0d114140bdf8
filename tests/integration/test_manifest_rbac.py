"""The member roles in deploy/ allow every request the agent and the DNS server make.

A clusterset runs the real agent and DNS server on clients that record each request; each request
is then judged by the RBAC authorizer the embedded apiserver enforces (kube's attributes and rule
matching) against the rules deploy/member gives that component's ServiceAccount. So a verb
the code starts using without its manifest failing here, before any cluster enforces RBAC.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import httpx2
import pytest
import pytest_asyncio
from lightkube import AsyncClient, KubeConfig

from isthmus.api.mcs import AGENT_NAMESPACE
from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.authorization.attributes import Attributes, request_attributes
from isthmus.apiserver.authorization.rbac import PolicyRule, rule_allows
from isthmus.apiserver.authorization.rbac import rules_of as policy_rules
from isthmus.discovery.agent import Agent
from isthmus.dns.service import DnsConfig, DnsService
from isthmus.kube.manifests import deploy_dir, render
from tests.harness.clusterset import ClusterSet
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


ANYONE = UserInfo("recorded")  # who made a request does not matter here: the rules bound to the account do


def request(verb: str, group: str, resource: str, namespace: str, name: str) -> Attributes:
    """A resource request's RBAC attributes, written by hand."""
    return Attributes(ANYONE, verb, True, api_group=group, resource=resource, namespace=namespace, name=name)


def describe(a: Attributes) -> str:
    where = f" in {a.namespace}" if a.namespace else ""
    return f"{a.verb} {a.combined_resource}.{a.api_group or 'core'} {a.name or '*'}{where}"


def rules_of(account: str) -> tuple[list[PolicyRule], list[PolicyRule]]:
    """(cluster-wide rules, rules in AGENT_NAMESPACE) bound to ServiceAccount `account`."""
    objs = render(deploy_dir() / "member")
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objs
             if o["kind"] in ("Role", "ClusterRole")}
    cluster: list[PolicyRule] = []
    local: list[PolicyRule] = []
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == AGENT_NAMESPACE
                   for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        rules = policy_rules(roles[(ref["kind"], ns, ref["name"])])
        (cluster if b["kind"] == "ClusterRoleBinding" else local).extend(rules)
    return cluster, local


def denied(account: str, requests: set[Attributes]) -> list[str]:
    """The requests kube's RBAC authorizer (ours, the one the embedded apiserver enforces) refuses."""
    cluster, local = rules_of(account)
    return sorted(describe(r) for r in requests
                  if not any(rule_allows(r, rule) for rule in cluster)
                  and not (r.namespace == AGENT_NAMESPACE and any(rule_allows(r, rule) for rule in local)))


def recording_client(kubeconfig: str, seen: set[Attributes]) -> AsyncClient:
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    http: Any = client._client._client  # lightkube's GenericAsyncClient → its httpx2 client

    async def record(request: httpx2.Request) -> None:
        query = {k: v[0] for k, v in parse_qs(request.url.query.decode()).items()}
        seen.add(request_attributes(request.method, request.url.path, query, ANYONE))

    http.event_hooks = {"request": [record], "response": []}
    return client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def audit(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[set[Attributes], set[Attributes]]]:
    agent_seen: set[Attributes] = set()
    dns_seen: set[Attributes] = set()
    async with ClusterSet(tmp_path_factory.mktemp("rbac"), n=2, start_agents=False) as cs:
        tasks: list[asyncio.Task[Any]] = []
        clients: list[AsyncClient] = []
        dns: DnsService | None = None
        try:
            for m in cs.clusters:
                client = recording_client(m.server.kubeconfig, agent_seen)
                clients.append(client)
                # A short lease: renewals (get+update of the Lease) happen within the test.
                agent = await Agent.from_cluster(client, m.id, lease_duration=3, renew_deadline=2,
                                                 retry_period=0.5)
                tasks.append(asyncio.create_task(agent.run()))
                await asyncio.wait_for(agent.wait_ready(), 30)
            dns_client = recording_client(cs.clusters[1].server.kubeconfig, dns_seen)
            clients.append(dns_client)
            dns = DnsService(dns_client, DnsConfig(cluster_id=cs.clusters[1].id, listen=[("127.0.0.1", 0)]))
            await dns.start()
            assert await dns.wait_ready(20)
            # Export in c1, import in c2; an export that conflicts (Events, conditions); withdraw.
            await cs.export(0, "web", "shop")
            await cs.ensure_namespace(1, "shop")
            await cs.wait_import(1, "web", "shop", clusters=["c1"], within=20)
            await cs.export(1, "web", "shop", slice_ports=[{"name": "http", "port": 81, "protocol": "UDP"}])
            await cs.wait_import(1, "web", "shop", clusters=["c1", "c2"], within=20)
            await cs.unexport(0, "web", "shop")
            await cs.unexport(1, "web", "shop")

            async def withdrawn() -> bool:
                assert await cs.local_import(1, "web", "shop") is None
                return True

            await eventually(withdrawn, 20)
            await asyncio.sleep(2)  # a lease renewal or two
            yield agent_seen, dns_seen
        finally:
            if dns is not None:
                await dns.stop()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in clients:
                await c.close()


async def test_agent_role_allows_every_request_the_agent_made(audit: tuple[set[Attributes], set[Attributes]]) -> None:
    agent_seen, _ = audit
    verbs = {(r.verb, r.resource, r.subresource) for r in agent_seen}
    # The scenario exercised what the role is for (else this test would prove little).
    assert {("watch", "serviceexports", ""), ("create", "serviceimports", ""), ("patch", "endpointslices", ""),
            ("delete", "serviceimports", ""), ("update", "leases", ""), ("get", "secrets", "")} <= verbs
    assert denied("isthmus-agent", agent_seen) == []


async def test_dns_role_allows_every_request_the_dns_server_made(audit: tuple[set[Attributes], set[Attributes]]) -> None:
    _, dns_seen = audit
    assert {r.resource for r in dns_seen} >= {"serviceimports", "services", "endpointslices"}
    assert denied("isthmus-dns", dns_seen) == []


async def test_the_judge_refuses_what_the_roles_do_not_grant() -> None:
    """The evaluator itself: a verb, a name or a namespace outside the role is refused."""
    assert denied("isthmus-agent", {request("get", "", "secrets", AGENT_NAMESPACE, "other")})
    assert denied("isthmus-agent", {request("list", "", "secrets", AGENT_NAMESPACE, "")})
    assert denied("isthmus-agent", {request("get", "", "secrets", "default", "isthmus-broker")})
    assert denied("isthmus-agent", {request("update", "multicluster.x-k8s.io", "serviceexports", "a", "b")})
    assert denied("isthmus-dns", {request("create", "", "events", "a", "")})
    assert not denied("isthmus-agent", {request("get", "", "secrets", AGENT_NAMESPACE, "isthmus-broker")})
