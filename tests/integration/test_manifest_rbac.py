"""The member roles in deploy/ allow every request the agent and the DNS server make.

A clusterset runs the real agent and DNS server on clients that record each request; each request
is then judged as kube's RBAC authorizer judges it (verb, API group, resource/subresource,
namespace, name) against the rules deploy/member gives that component's ServiceAccount. So a verb
the code starts using without its manifest failing here, before any cluster enforces RBAC.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import httpx2
import pytest
import pytest_asyncio
from lightkube import AsyncClient, KubeConfig

from isthmus.api.mcs import AGENT_NAMESPACE
from isthmus.dns.service import DnsConfig, DnsService
from isthmus.kube.manifests import deploy_dir, render
from isthmus.mcs.agent import Agent
from tests.integration.mcs_harness import ClusterSet, eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


@dataclass(frozen=True)
class Request:
    """A request's RBAC attributes, as kube's RequestInfoFactory derives them."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str

    def __str__(self) -> str:
        res = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {res}.{self.group or 'core'} {self.name or '*'}{where}"


def request_info(method: str, url: httpx2.URL) -> Request:
    parts = [p for p in url.path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    query = parse_qs(url.query.decode() if isinstance(url.query, bytes) else str(url.query))
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")
    if method == "GET":
        verb = "watch" if query.get("watch", ["false"])[0] in ("true", "1") else ("get" if name else "list")
    if method == "DELETE" and not name:
        verb = "deletecollection"
    return Request(verb, group, resource, sub, namespace, name)


def allows(rule: dict[str, Any], req: Request) -> bool:
    def has(values: list[str], v: str) -> bool:
        return "*" in values or v in values

    res = req.resource + (f"/{req.subresource}" if req.subresource else "")
    return (has(rule.get("verbs") or [], req.verb) and has(rule.get("apiGroups") or [], req.group)
            and has(rule.get("resources") or [], res)
            and (not rule.get("resourceNames") or (req.name != "" and req.name in rule["resourceNames"])))


def rules_of(account: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cluster-wide rules, rules in AGENT_NAMESPACE) bound to ServiceAccount `account`."""
    objs = render(deploy_dir() / "member")
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objs
             if o["kind"] in ("Role", "ClusterRole")}
    cluster: list[dict[str, Any]] = []
    local: list[dict[str, Any]] = []
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == AGENT_NAMESPACE
                   for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        rules = roles[(ref["kind"], ns, ref["name"])]["rules"]
        (cluster if b["kind"] == "ClusterRoleBinding" else local).extend(rules)
    return cluster, local


def denied(account: str, requests: set[Request]) -> list[str]:
    cluster, local = rules_of(account)
    return sorted(str(r) for r in requests
                  if not any(allows(rule, r) for rule in cluster)
                  and not (r.namespace == AGENT_NAMESPACE and any(allows(rule, r) for rule in local)))


def recording_client(kubeconfig: str, seen: set[Request]) -> AsyncClient:
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    http: Any = client._client._client  # lightkube's GenericAsyncClient → its httpx2 client

    async def record(request: httpx2.Request) -> None:
        seen.add(request_info(request.method, request.url))

    http.event_hooks = {"request": [record], "response": []}
    return client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def audit(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[set[Request], set[Request]]]:
    agent_seen: set[Request] = set()
    dns_seen: set[Request] = set()
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


async def test_agent_role_allows_every_request_the_agent_made(audit: tuple[set[Request], set[Request]]) -> None:
    agent_seen, _ = audit
    verbs = {(r.verb, r.resource, r.subresource) for r in agent_seen}
    # The scenario exercised what the role is for (else this test would prove little).
    assert {("watch", "serviceexports", ""), ("create", "serviceimports", ""), ("patch", "endpointslices", ""),
            ("delete", "serviceimports", ""), ("update", "leases", ""), ("get", "secrets", "")} <= verbs
    assert denied("isthmus-agent", agent_seen) == []


async def test_dns_role_allows_every_request_the_dns_server_made(audit: tuple[set[Request], set[Request]]) -> None:
    _, dns_seen = audit
    assert {r.resource for r in dns_seen} >= {"serviceimports", "services", "endpointslices"}
    assert denied("isthmus-dns", dns_seen) == []


async def test_the_judge_refuses_what_the_roles_do_not_grant() -> None:
    """The evaluator itself: a verb, a name or a namespace outside the role is refused."""
    assert denied("isthmus-agent", {Request("get", "", "secrets", "", AGENT_NAMESPACE, "other")})
    assert denied("isthmus-agent", {Request("list", "", "secrets", "", AGENT_NAMESPACE, "")})
    assert denied("isthmus-agent", {Request("get", "", "secrets", "", "default", "isthmus-broker")})
    assert denied("isthmus-agent", {Request("update", "multicluster.x-k8s.io", "serviceexports", "", "a", "b")})
    assert denied("isthmus-dns", {Request("create", "", "events", "", "a", "")})
    assert not denied("isthmus-agent", {Request("get", "", "secrets", "", AGENT_NAMESPACE, "isthmus-broker")})
