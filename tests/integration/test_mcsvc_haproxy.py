"""The `haproxy` provider end to end: a LoadBalancer MultiClusterService becomes a LoadBalancerPool on
the broker, run by a real pool manager (HAProxy), whose one address balances over pods of two
clusters and follows their endpoint changes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lightkube.resources.core_v1 import Namespace

from isthmus.api.lb import LB_NAMESPACE, LoadBalancerPool
from isthmus.api.mcsvc import MultiClusterService, pool_name
from isthmus.clusterset.membership import membership
from isthmus.exposure.broker import BrokerController
from isthmus.exposure.haproxy import HAProxyLoadBalancer
from isthmus.exposure.member import MemberController
from isthmus.haproxy.manager import PoolManager
from isthmus.kube.resources import resource_for
from tests.harness.clusterset import ClusterSet, as_dict, endpoint_slice, service
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]
MCS: Any = resource_for(MultiClusterService)
NS = "shop"
PUBLIC, PRIVATE = "127.30.250.1", "127.31.250.1"
PORT = 18080
PODS = {0: "127.101.0.90", 1: "127.102.0.90"}
GRACE = 3.0


async def echo(address: str, name: str) -> asyncio.Server:
    """A pod of port `http`: answers every connection with an HTTP response naming itself (the load
    balancer's health check asks ports named http for an HTTP answer)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.0 200 OK\r\nContent-Length: {len(name)}\r\n\r\n{name}".encode())
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, address, 8080)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    tmp = tmp_path_factory.mktemp("mcsvc-haproxy")
    servers = [await echo(ip, f"c{i + 1}") for i, ip in PODS.items()]
    SERVERS[:] = servers
    tasks: list[asyncio.Task[Any]] = []
    async with ClusterSet(tmp, n=2) as cs:
        for ns in (NS, LB_NAMESPACE):
            with contextlib.suppress(Exception):
                await cs.broker_client.create(Namespace.from_dict({"metadata": {"name": ns}}))
        manager = PoolManager(cs.broker_client, identity="broker-edge", public_address=PUBLIC,
                              private_address=PRIVATE, state_dir=tmp / "pools", lease_duration=3, renew_period=0.5)
        tasks.append(asyncio.create_task(manager.run()))
        members = []
        for m in cs.clusters:
            await cs.ensure_namespace(m.index, NS)
            cid, info = await membership(m.client)
            members.append(MemberController(cluster=m.client, broker=info.client(), cluster_id=cid,
                                            broker_namespace=info.namespace, identity=f"t-{cid}"))
            tasks.append(asyncio.create_task(members[-1].run()))
        broker = BrokerController(cs.broker_client, HAProxyLoadBalancer(cs.broker_client),
                                  broker_namespace="isthmus-broker", identity="t-broker", grace=GRACE)
        tasks.append(asyncio.create_task(broker.run()))
        try:
            yield cs
        finally:
            await manager.shutdown()
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t
            for s in SERVERS:
                s.close()


SERVERS: list[asyncio.Server] = []


async def ask() -> str:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(PUBLIC, PORT), 2)
    try:
        return (await asyncio.wait_for(reader.read(200), 2)).decode().rpartition("\r\n\r\n")[2]
    finally:
        writer.close()


async def test_one_address_balances_over_both_clusters_and_follows_endpoints(env: ClusterSet) -> None:
    cs = env
    for i, ip in PODS.items():
        await cs.put(i, service("shop", NS, ports=[{"name": "http", "port": PORT, "targetPort": 8080}],
                                cluster_ip=f"127.{201 + i}.0.9"))
        await cs.put(i, endpoint_slice("shop", NS, endpoints=[(ip, True)], ports=[{"name": "http", "port": 8080}]))
    await cs.broker_client.apply(MCS.from_dict({
        "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "shop", "namespace": NS}, "spec": {"types": ["LoadBalancer"]}}),
        field_manager="test", force=True)

    async def ready() -> dict[str, Any]:
        obj = as_dict(await cs.broker_client.get(MCS, "shop", namespace=NS))
        conds = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
        assert conds.get("LoadBalancerReady", {}).get("status") == "True", obj.get("status")
        return obj

    obj = await eventually(ready, timeout=40)
    assert obj["status"]["loadBalancer"]["ingress"] == [
        {"ip": PUBLIC, "ipMode": "Proxy", "ports": [{"port": PORT, "protocol": "TCP"}]}]
    assert obj["status"]["address"] == PUBLIC

    async def both() -> set[str]:
        seen = {await ask() for _ in range(8)}
        assert seen == {"c1", "c2"}, seen
        return seen

    await eventually(both, timeout=20)
    # c2's pod stops being ready: the load balancer sends only to c1.
    await cs.put(1, endpoint_slice("shop", NS, endpoints=[(PODS[1], False)], ports=[{"name": "http", "port": 8080}]))

    async def only_c1() -> bool:
        seen = {await ask() for _ in range(8)}
        assert seen == {"c1"}, seen
        return True

    await eventually(only_c1, timeout=20)
    # c2 ready again, then the whole of c2 dies while serving: its pods and its agent (no heartbeat).
    # Its backends leave the load balancer once it is silent for the grace; requests keep succeeding.
    await cs.put(1, endpoint_slice("shop", NS, endpoints=[(PODS[1], True)], ports=[{"name": "http", "port": 8080}]))
    await eventually(both, timeout=20)
    SERVERS[1].close()
    await cs.stop_agent(1)

    async def failed_over() -> bool:
        pool = LoadBalancerPool.from_dict((await cs.broker_client.get(resource_for(LoadBalancerPool),
                                                                       pool_name(NS, "shop"))).to_dict())
        servers = {s.address for b in pool.spec.haproxy.backends for s in b.servers}
        assert servers == {PODS[0]}, servers
        return True

    await eventually(failed_over, timeout=GRACE * 6)
    assert {await ask() for _ in range(8)} == {"c1"}
    # c2 comes back: its pods and its heartbeat; the load balancer takes it in again.
    SERVERS[1] = await echo(PODS[1], "c2")
    await cs.start_agent(1)
    await eventually(both, timeout=GRACE * 6)
    # Delete: the pool goes, and with it the listener.
    await cs.broker_client.delete(MCS, "shop", namespace=NS)

    async def gone() -> bool:
        pools = [p async for p in cs.broker_client.list(resource_for(LoadBalancerPool))]
        assert all(p.metadata.name != pool_name(NS, "shop") for p in pools)
        try:
            answer = await ask()
        except OSError:
            return True
        raise AssertionError(f"still served: {answer!r}")

    await eventually(gone, timeout=20)
