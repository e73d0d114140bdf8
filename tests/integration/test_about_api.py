"""The About API against real embedded apiservers: `isthmus join` writes cluster.clusterset.k8s.io and
clusterset.k8s.io, refuses (exit 2) to change an ID or a clusterset it did not write, `leave` removes
what it wrote; the agent and the DNS server refuse to run under an ID the property contradicts."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Event
from typer.testing import CliRunner

from isthmus.api.about import (
    CLUSTER_ID_PROPERTY,
    CLUSTERSET_PROPERTY,
    ClusterProperty,
    ClusterPropertySpec,
)
from isthmus.api.base import ObjectMeta
from isthmus.api.mcs import AGENT_NAMESPACE, Broker, Cluster
from isthmus.clusterset import broker
from isthmus.clusterset.about import ClusterIdentityError
from isthmus.discovery.agent import Agent
from isthmus.discovery.errors import AgentConfigError
from isthmus.dns.service import DnsConfig, DnsService
from isthmus.kube.helpers import create, get, get_or_none, list_all, merge_patch
from isthmus.kube.resources import resource_for
from tests.harness.apiserver import RunningApiServer

pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.timeout(120)]

NS = "isthmus-broker"
ADMIN_TOKEN = "broker-admin-token"
V1ALPHA1 = create_global_resource("about.k8s.io", "v1alpha1", "ClusterProperty", "clusterproperties")


@dataclass
class Env:
    tmp: Path
    servers: list[RunningApiServer]

    async def server(self, name: str, **kw: Any) -> RunningApiServer:
        srv = RunningApiServer(self.tmp / name, bookmark_interval=1.0, **kw)
        await srv.start()
        self.servers.append(srv)
        return srv

    async def broker(self, name: str) -> tuple[RunningApiServer, Path]:
        """A broker API with deploy-broker run on it, and its broker-info file."""
        srv = await self.server(name, token=ADMIN_TOKEN)
        info = await broker.deploy_broker(srv.client(), namespace=NS, enable_clusterset_ip=False, cidr_range=None,
                                          server_url=srv.url, ca_pem=None)
        path = self.tmp / f"{name}.subm"
        path.write_text(info.encode())
        return srv, path


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = Env(tmp_path, [])
    try:
        yield e
    finally:
        for s in e.servers:
            await s.close()


def _cli(*args: str) -> Any:
    from isthmus.cli.main import app

    return CliRunner().invoke(app, list(args))


async def _join(member: RunningApiServer, brk: RunningApiServer, info: Path, cid: str, *extra: str) -> Any:
    return await asyncio.to_thread(_cli, "join", str(info), "--kubeconfig", member.kubeconfig, "--cluster-id", cid,
                                   "--broker-kubeconfig", brk.kubeconfig, "--no-coredns", *extra)


async def _props(client: AsyncClient) -> dict[str, str | None]:
    return {p.name: p.value for p in await list_all(client, ClusterProperty)}


async def _broker_uid(brk: RunningApiServer) -> str:
    uid = (await get(brk.client(), Broker, "broker", namespace=NS)).metadata.uid
    assert uid
    return uid


async def test_join_writes_both_properties_and_leave_removes_them(env: Env) -> None:
    brk, info = await env.broker("broker")
    member = await env.server("c1")
    client = member.client()
    result = await _join(member, brk, info, "c1")
    assert result.exit_code == 0, result.output
    uid = await _broker_uid(brk)
    assert await _props(client) == {CLUSTER_ID_PROPERTY: "c1", CLUSTERSET_PROPERTY: uid}
    assert f"ClusterProperties (About API): cluster.clusterset.k8s.io=c1, clusterset.k8s.io={uid}" in result.output
    # about-api's older version is served too: a tool speaking v1alpha1 reads the same value.
    old = await client.get(V1ALPHA1, CLUSTER_ID_PROPERTY)
    assert old.apiVersion == "about.k8s.io/v1alpha1" and old["spec"]["value"] == "c1"

    again = await _join(member, brk, info, "c1")  # idempotent
    assert again.exit_code == 0, again.output
    assert await _props(client) == {CLUSTER_ID_PROPERTY: "c1", CLUSTERSET_PROPERTY: uid}

    left = await asyncio.to_thread(_cli, "leave", "--kubeconfig", member.kubeconfig, "--broker-kubeconfig",
                                   brk.kubeconfig, "--yes")
    assert left.exit_code == 0, left.output
    assert await _props(client) == {}


async def test_join_refuses_a_cluster_id_set_before_it_and_leave_keeps_it(env: Env) -> None:
    brk, info = await env.broker("broker")
    member = await env.server("m")
    client = member.client()
    assert (await _join(member, brk, info, "seed")).exit_code == 0  # installs the CRDs
    assert (await asyncio.to_thread(_cli, "leave", "--kubeconfig", member.kubeconfig, "--broker-kubeconfig",
                                    brk.kubeconfig, "--yes")).exit_code == 0
    await create(client, ClusterProperty(metadata=ObjectMeta(name=CLUSTER_ID_PROPERTY),
                                         spec=ClusterPropertySpec(value="prod-east")))

    for extra in ((), ("--force",)):
        refused = await _join(member, brk, info, "c1", *extra)
        assert refused.exit_code == 2, refused.output
        assert "ClusterProperty cluster.clusterset.k8s.io names it 'prod-east', not 'c1'" in refused.output
    # Refused before registering: the broker knows no c1, the cluster is in no clusterset.
    assert await get_or_none(brk.client(), Cluster, "c1", namespace=NS) is None
    assert await _props(client) == {CLUSTER_ID_PROPERTY: "prod-east"}

    joined = await _join(member, brk, info, "prod-east")
    assert joined.exit_code == 0, joined.output
    left = await asyncio.to_thread(_cli, "leave", "--kubeconfig", member.kubeconfig, "--broker-kubeconfig",
                                   brk.kubeconfig, "--yes")
    assert left.exit_code == 0, left.output
    assert "ClusterProperty cluster.clusterset.k8s.io ('prod-east') kept: it was there before `isthmus join`" \
        in left.output
    assert await _props(client) == {CLUSTER_ID_PROPERTY: "prod-east"}


async def test_a_second_join_with_another_id_is_refused_and_force_moves_both(env: Env) -> None:
    brk, info = await env.broker("broker")
    member = await env.server("c1")
    client = member.client()
    assert (await _join(member, brk, info, "c1")).exit_code == 0
    refused = await _join(member, brk, info, "c2")
    assert refused.exit_code == 2 and "already joined as 'c1'" in refused.output
    assert (await _props(client))[CLUSTER_ID_PROPERTY] == "c1"
    moved = await _join(member, brk, info, "c2", "--force")  # join's own property yields to --force
    assert moved.exit_code == 0, moved.output
    assert (await _props(client))[CLUSTER_ID_PROPERTY] == "c2"


async def test_join_refuses_a_cluster_of_another_clusterset(env: Env) -> None:
    first, first_info = await env.broker("first")
    second, second_info = await env.broker("second")
    member = await env.server("c1")
    assert (await _join(member, first, first_info, "c1")).exit_code == 0
    refused = await _join(member, second, second_info, "c1")
    assert refused.exit_code == 2, refused.output
    assert "this cluster belongs to another clusterset" in refused.output
    assert f"{await _broker_uid(first)!r} (broker {first.url} namespace {NS})" in refused.output
    assert await get_or_none(second.client(), Cluster, "c1", namespace=NS) is None
    assert (await _props(member.client()))[CLUSTERSET_PROPERTY] == await _broker_uid(first)


async def test_agent_and_dns_refuse_an_id_the_property_contradicts(env: Env) -> None:
    brk, info = await env.broker("broker")
    member = await env.server("c1")
    client = member.client()
    assert (await _join(member, brk, info, "c1")).exit_code == 0
    # They agree: both start.
    agent = await Agent.from_cluster(client, None)
    assert agent.cluster_id == "c1"
    await agent.broker.close()
    dns = DnsService(client, DnsConfig(cluster_id="c1", listen=[("127.0.0.1", 0)]))
    await dns.start()
    assert dns.bound
    await dns.stop()

    await merge_patch(client, resource_for(ClusterProperty), CLUSTER_ID_PROPERTY, {"spec": {"value": "prod-east"}},
                      field_manager="someone")
    with pytest.raises(AgentConfigError) as agent_err:
        await Agent.from_cluster(client, None)
    assert "'prod-east'" in str(agent_err.value) and "'c1'" in str(agent_err.value)
    events = [e for e in await list_all(client, Event, namespace=AGENT_NAMESPACE) if e.reason == "ClusterIDMismatch"]
    assert len(events) == 1 and events[0].type == "Warning"
    assert events[0].involvedObject.kind == "ServiceDiscovery" and "'prod-east'" in (events[0].message or "")

    dns = DnsService(client, DnsConfig(cluster_id="c1", listen=[("127.0.0.1", 0)]))
    with pytest.raises(ClusterIdentityError, match=r"'prod-east'.*'c1'"):
        await dns.start()
    assert not dns.bound and not dns.ready  # never listened
    await dns.stop()


async def test_a_cluster_joined_before_the_about_api_still_runs(env: Env) -> None:
    """An upgrade: the ServiceDiscovery exists but no property does (the agent and DNS warn and run)."""
    brk, info = await env.broker("broker")
    member = await env.server("c1")
    client = member.client()
    assert (await _join(member, brk, info, "c1")).exit_code == 0
    for name in (CLUSTERSET_PROPERTY, CLUSTER_ID_PROPERTY):
        await client.delete(V1ALPHA1, name)
    agent = await Agent.from_cluster(client, None)
    assert agent.cluster_id == "c1"
    await agent.broker.close()
    dns = DnsService(client, DnsConfig(cluster_id="c1", listen=[("127.0.0.1", 0)]))
    await dns.start()
    assert dns.bound
    await dns.stop()
    # Running join again (what the upgrade notes say) writes them.
    assert (await _join(member, brk, info, "c1")).exit_code == 0
    assert await _props(client) == {CLUSTER_ID_PROPERTY: "c1", CLUSTERSET_PROPERTY: await _broker_uid(brk)}


async def test_the_commands_exit_2_naming_both_ids(env: Env) -> None:
    """`isthmus agent` and `isthmus dns` as a pod runs them: one error line, exit code 2."""
    brk, info = await env.broker("broker")
    member = await env.server("c1")
    assert (await _join(member, brk, info, "c1")).exit_code == 0
    await merge_patch(member.client(), resource_for(ClusterProperty), CLUSTER_ID_PROPERTY,
                      {"spec": {"value": "prod-east"}}, field_manager="someone")
    for args in (["agent"], ["dns", "--listen", "127.0.0.1:0"]):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "isthmus", *args, "--kubeconfig", member.kubeconfig,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 2, (args, err)
        assert err.decode().splitlines()[-1].startswith("error: this cluster's ClusterProperty cluster.clusterset.k8s.io says its "
                                       "ID is 'prod-east', but it joined the clusterset as 'c1'"), err
