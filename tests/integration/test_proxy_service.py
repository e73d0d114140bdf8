"""`isthmus proxy` against an embedded apiserver, with real TCP/UDP traffic over loopback.

Objects are written by hand in the shapes docs/discovery.md specifies (what kube-lite and the agent
write); the backends are small echo servers on their own 127.x addresses.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.mcs import (
    KUBE_SERVICE_NAME_LABEL,
)
from isthmus.kube.helpers import install_crds
from isthmus.proxy import Backend, ListenerKey, ProxyConfig, ProxyService
from tests.harness.apiserver import RunningApiServer
from tests.harness.backends import TcpEcho, UdpEcho, random_net, tcp_ask, udp_ask
from tests.harness.polling import eventually
from tests.harness.proxy import (
    NS,
    SI,
    SVC_PORT,
    TARGET,
    create_import,
    endpoints,
    imported_slice,
    kube_slice,
    service,
    set_import_clusters,
)

pytestmark = pytest.mark.timeout(90)


@dataclass
class Env:
    client: AsyncClient
    proxy: ProxyService
    net: int

    def ip(self, role: str, host: int) -> str:
        """127.201.N.x ClusterIPs, 127.202.N.x backends, 127.205.N.x VIPs."""
        return f"127.{ {'cip': 201, 'pod': 202, 'vip': 205}[role] }.{self.net}.{host}"

    async def listening(self, key: ListenerKey, backends: int | None = None) -> None:
        def ok() -> bool:
            if not self.proxy.is_listening(key):
                return False
            got = self.proxy.backends(key)
            return backends is None or (got is not None and len(got) == backends)

        await eventually(ok)


@pytest.fixture
async def env(apiserver: RunningApiServer) -> AsyncIterator[Env]:
    """The listeners' own behaviour (round robin, relay counters): connect-time balancing off."""
    async for e in _env(apiserver, socket_lb=False):
        yield e


@pytest.fixture
async def lb_env(apiserver: RunningApiServer) -> AsyncIterator[Env]:
    """With connect-time balancing, as the proxy runs by default (root on Linux 5.7+)."""
    async for e in _env(apiserver, socket_lb=True):
        if e.proxy.socket_lb is None:
            pytest.skip("the kernel refused connect-time balancing here (needs root, cgroup v2, Linux 5.7+)")
        yield e


async def _env(apiserver: RunningApiServer, *, socket_lb: bool) -> AsyncIterator[Env]:
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    proxy = ProxyService(
        client,
        ProxyConfig(
            cluster_id="c1", node_address="127.0.0.1", metrics_addr="127.0.0.1:0", bind_backoff_base=0.05,
            socket_lb=socket_lb,
        ),
    )
    await proxy.start()
    assert await proxy.wait_ready(20)
    try:
        yield Env(client, proxy, random_net())
    finally:
        await proxy.stop()


# --- object builders --------------------------------------------------------------------------------


async def set_endpoints(client: AsyncClient, slice_name: str, ips: list[str]) -> None:
    await client.patch(
        EndpointSlice, slice_name, {"endpoints": endpoints(*ips)}, namespace=NS, patch_type=PatchType.MERGE
    )


async def who(host: str, port: int, n: int, source: str | None = None) -> Counter[str]:
    return Counter([(await tcp_ask(host, port, source=source)).split("|")[0] for _ in range(n)])


# --- tests ------------------------------------------------------------------------------------------


async def test_cluster_ip_tcp_round_robin_and_live_endpoints(env: Env) -> None:
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    b = await TcpEcho("b", env.ip("pod", 2), TARGET).start()
    c = await TcpEcho("c", env.ip("pod", 3), TARGET).start()
    cip = env.ip("cip", 10)
    key = ListenerKey("TCP", cip, SVC_PORT)
    try:
        await env.client.create(service("web", cip))
        await env.client.create(kube_slice("web", [a.host, b.host]))
        await env.listening(key, backends=2)
        assert await who(cip, SVC_PORT, 4) == {"a": 2, "b": 2}
        # a long-lived connection keeps its backend while the endpoint set changes under it
        reader, writer = await asyncio.open_connection(cip, SVC_PORT)
        writer.write(b"first\n")
        pinned = (await reader.readline()).decode().split("|")[0]
        survivor = b if pinned == "a" else a
        await set_endpoints(env.client, "web-abcde", [survivor.host, c.host])
        await eventually(
            lambda: (
                env.proxy.backends(key)
                == tuple(sorted([Backend(survivor.host, TARGET), Backend(c.host, TARGET)]))
            )
        )
        assert set(await who(cip, SVC_PORT, 4)) == {survivor.name, "c"}  # the removed one gets nothing new
        writer.write(b"second\n")
        assert (await reader.readline()).decode().split("|")[0] == pinned
        writer.close()

        await env.client.delete(Service, "web", namespace=NS)
        await eventually(lambda: key not in env.proxy.listeners)
        with pytest.raises(OSError):
            await tcp_ask(cip, SVC_PORT, timeout=2)
    finally:
        for s in (a, b, c):
            await s.stop()


async def test_cluster_ip_udp(env: Env) -> None:
    a = await UdpEcho("a", env.ip("pod", 1), TARGET).start()
    b = await UdpEcho("b", env.ip("pod", 2), TARGET).start()
    cip = env.ip("cip", 10)
    key = ListenerKey("UDP", cip, 8053)
    try:
        ports = [{"name": "dns", "port": 8053, "targetPort": TARGET, "protocol": "UDP"}]
        await env.client.create(service("dns", cip, ports))
        await env.client.create(
            kube_slice("dns", [a.host, b.host], [{"name": "dns", "port": TARGET, "protocol": "UDP"}])
        )
        await env.listening(key, backends=2)
        answers = [await udp_ask(cip, 8053, f"q{i}") for i in range(4)]
        assert Counter(x.split("|")[0] for x in answers) == {"a": 2, "b": 2}
        assert all(x.endswith(f"|q{i}") for i, x in enumerate(answers))
    finally:
        await a.stop()
        await b.stop()


async def test_client_ip_affinity_pins_each_client(env: Env) -> None:
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    b = await TcpEcho("b", env.ip("pod", 2), TARGET).start()
    ua = await UdpEcho("a", env.ip("pod", 1), TARGET).start()
    ub = await UdpEcho("b", env.ip("pod", 2), TARGET).start()
    cip = env.ip("cip", 10)
    try:
        ports = [
            {"name": "http", "port": SVC_PORT, "targetPort": TARGET, "protocol": "TCP"},
            {"name": "dns", "port": 8053, "targetPort": TARGET, "protocol": "UDP"},
        ]
        await env.client.create(
            service(
                "sticky",
                cip,
                ports,
                sessionAffinity="ClientIP",
                sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}},
            )
        )
        slice_ports = [
            {"name": "http", "port": TARGET, "protocol": "TCP"},
            {"name": "dns", "port": TARGET, "protocol": "UDP"},
        ]
        await env.client.create(kube_slice("sticky", [a.host, b.host], slice_ports))
        await env.listening(ListenerKey("TCP", cip, SVC_PORT), backends=2)
        await env.listening(ListenerKey("UDP", cip, 8053), backends=2)
        assert env.proxy.target(ListenerKey("TCP", cip, SVC_PORT)).affinity_timeout == 60  # type: ignore[union-attr]

        two = await who(cip, SVC_PORT, 6, source="127.0.0.2")
        three = await who(cip, SVC_PORT, 6, source="127.0.0.3")
        assert len(two) == 1 and len(three) == 1 and set(two) != set(three)

        udp_two = {(await udp_ask(cip, 8053, source="127.0.0.2")).split("|")[0] for _ in range(5)}
        udp_three = {(await udp_ask(cip, 8053, source="127.0.0.3")).split("|")[0] for _ in range(5)}
        assert len(udp_two) == 1 and len(udp_three) == 1 and udp_two != udp_three

        # the pinned backend leaves: the client moves, and sticks to its new backend
        pinned = next(iter(two))
        remaining = b if pinned == "a" else a
        await set_endpoints(env.client, "sticky-abcde", [remaining.host])
        await env.listening(ListenerKey("TCP", cip, SVC_PORT), backends=1)
        assert await who(cip, SVC_PORT, 3, source="127.0.0.2") == {remaining.name: 3}
    finally:
        for s in (a, b, ua, ub):
            await s.stop()


async def test_node_port(env: Env) -> None:
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    node_port = random.randint(30000, 32767)
    cip = env.ip("cip", 10)
    try:
        ports = [
            {"name": "http", "port": SVC_PORT, "targetPort": TARGET, "nodePort": node_port, "protocol": "TCP"}
        ]
        await env.client.create(service("np", cip, ports, type="NodePort"))
        await env.client.create(kube_slice("np", [a.host]))
        await env.listening(ListenerKey("TCP", "127.0.0.1", node_port), backends=1)
        assert (await tcp_ask("127.0.0.1", node_port)).startswith("a|")
        assert (await tcp_ask(cip, SVC_PORT)).startswith("a|")
    finally:
        await a.stop()


async def test_vip_balances_over_every_exporting_cluster(env: Env) -> None:
    local = await TcpEcho("local", env.ip("pod", 1), TARGET).start()
    remote = await TcpEcho("remote", env.ip("pod", 2), TARGET).start()
    vip = env.ip("vip", 5)
    key = ListenerKey("TCP", vip, SVC_PORT)
    try:
        await env.client.create(service("api", env.ip("cip", 10)))
        await env.client.create(kube_slice("api", [local.host]))
        await env.client.create(imported_slice("api", "c2", [remote.host]))
        await create_import(env.client, "api", vip, ["c1", "c2"])
        await env.listening(key, backends=2)
        target = env.proxy.target(key)
        assert target is not None and target.reuse_port and target.kind == "ClusterSetIP"
        assert await who(vip, SVC_PORT, 4) == {"local": 2, "remote": 2}

        # another proxy on the machine (another cluster's) can bind the same VIP
        other = socket.socket()
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind((vip, SVC_PORT))
        other.close()

        await set_import_clusters(env.client, "api", ["c2"])  # this cluster stopped exporting
        await env.listening(key, backends=1)
        assert await who(vip, SVC_PORT, 3) == {"remote": 3}

        await env.client.delete(SI, "api", namespace=NS)
        await eventually(lambda: key not in env.proxy.listeners)
        assert ListenerKey("TCP", env.ip("cip", 10), SVC_PORT) in env.proxy.listeners
    finally:
        await local.stop()
        await remote.stop()


async def test_vip_claimed_by_a_second_import_keeps_its_first_owner(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """A VIP freed and reallocated while this cluster still imports the old service: the service
    holding it keeps every port of it, the newcomer waits, and the conflict is logged once."""
    old = await TcpEcho("old", env.ip("pod", 1), TARGET).start()
    new = await TcpEcho("new", env.ip("pod", 2), TARGET).start()
    vip = env.ip("vip", 7)
    key, metrics = ListenerKey("TCP", vip, SVC_PORT), ListenerKey("TCP", vip, SVC_PORT + 1)
    try:
        await env.client.create(imported_slice("zeta", "c2", [old.host]))
        await create_import(env.client, "zeta", vip, ["c2"])
        await env.listening(key, backends=1)
        # the newcomer sorts first by name, and asks for one more port on the same VIP
        await env.client.create(imported_slice("alpha", "c3", [new.host]))
        ports = [
            {"name": "http", "port": SVC_PORT, "protocol": "TCP"},
            {"name": "metrics", "port": SVC_PORT + 1, "protocol": "TCP"},
        ]
        await create_import(env.client, "alpha", vip, ["c3"], ports=ports)
        await eventually(lambda: env.proxy.stats.conflicts == 1)
        target = env.proxy.target(key)
        assert target is not None and target.service == f"{NS}/zeta"
        assert env.proxy.backends(key) == (Backend(old.host, TARGET),)
        assert metrics not in env.proxy.listeners, "no port of the VIP may serve the newcomer"
        assert await who(vip, SVC_PORT, 4) == {"old": 4}

        # rebuilds of both services change nothing, and the conflict is not logged again
        for extra in (3, 4):
            rebuilds = env.proxy.stats.rebuilds
            await set_endpoints(env.client, "alpha-c3", [new.host, env.ip("pod", extra)])
            await eventually(lambda n=rebuilds: env.proxy.stats.rebuilds > n)
        assert env.proxy.backends(key) == (Backend(old.host, TARGET),)
        assert await who(vip, SVC_PORT, 2) == {"old": 2}
        logged = [r for r in caplog.records if r.getMessage() == "listener conflict"]
        assert len(logged) == 1 and "shop/alpha" in str(getattr(logged[0], "conflict", ""))

        # the holder lets go: the newcomer gets the whole VIP
        await env.client.delete(SI, "zeta", namespace=NS)
        await env.listening(metrics)
        await eventually(lambda: (t := env.proxy.target(key)) is not None and t.service == f"{NS}/alpha")
        assert env.proxy.stats.conflicts == 0
        assert await who(vip, SVC_PORT, 2) == {"new": 2}
    finally:
        await old.stop()
        await new.stop()


async def test_vip_uses_the_local_kube_slices_never_an_mcs_slice_from_this_cluster(env: Env) -> None:
    """The exporting cluster's agent publishes an MCS slice for its own export too: ignored here."""
    local = await TcpEcho("local", env.ip("pod", 1), TARGET).start()
    remote = await TcpEcho("remote", env.ip("pod", 2), TARGET).start()
    stale = env.ip("pod", 9)  # only in the MCS slice naming this cluster (c1)
    vip = env.ip("vip", 8)
    key = ListenerKey("TCP", vip, SVC_PORT)
    try:
        await env.client.create(service("own", env.ip("cip", 12)))
        await env.client.create(kube_slice("own", [local.host]))
        await env.client.create(imported_slice("own", "c1", [local.host, stale]))
        await env.client.create(imported_slice("own", "c2", [remote.host]))
        await eventually(lambda: env.proxy.slices.cache.get(f"{NS}/own-c2") is not None)
        await eventually(lambda: env.proxy.slices.cache.get(f"{NS}/own-c1") is not None)
        # not (yet) listed as an exporter: none of this cluster's endpoints
        await create_import(env.client, "own", vip, ["c2"])
        await env.listening(key, backends=1)
        assert env.proxy.backends(key) == (Backend(remote.host, TARGET),)
        # an exporter: its endpoints once, from its kube slices
        await set_import_clusters(env.client, "own", ["c1", "c2"])
        await env.listening(key, backends=2)
        assert env.proxy.backends(key) == (Backend(local.host, TARGET), Backend(remote.host, TARGET))
        assert await who(vip, SVC_PORT, 4) == {"local": 2, "remote": 2}
    finally:
        await local.stop()
        await remote.stop()


async def test_vip_affinity_from_the_import(env: Env) -> None:
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    b = await TcpEcho("b", env.ip("pod", 2), TARGET).start()
    vip = env.ip("vip", 6)
    try:
        await env.client.create(imported_slice("db", "c2", [a.host]))
        await env.client.create(imported_slice("db", "c3", [b.host]))
        await create_import(env.client, "db", vip, ["c2", "c3"], sessionAffinity="ClientIP")
        await env.listening(ListenerKey("TCP", vip, SVC_PORT), backends=2)
        assert len(await who(vip, SVC_PORT, 5, source="127.0.0.2")) == 1
        assert len(await who(vip, SVC_PORT, 5, source="127.0.0.3")) == 1
    finally:
        await a.stop()
        await b.stop()


async def test_no_ready_endpoint_resets(env: Env) -> None:
    cip = env.ip("cip", 10)
    await env.client.create(service("empty", cip))
    await env.client.create(
        EndpointSlice.from_dict(
            {
                "metadata": {
                    "name": "empty-x",
                    "namespace": NS,
                    "labels": {KUBE_SERVICE_NAME_LABEL: "empty"},
                },
                "addressType": "IPv4",
                "endpoints": endpoints(env.ip("pod", 1), ready=False),
                "ports": [{"name": "http", "port": TARGET, "protocol": "TCP"}],
            }
        )
    )
    await env.listening(ListenerKey("TCP", cip, SVC_PORT), backends=0)
    with pytest.raises(ConnectionError):
        await tcp_ask(cip, SVC_PORT)


async def test_bind_failure_is_retried_not_fatal(env: Env) -> None:
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    cip = env.ip("cip", 11)
    squatter = socket.socket()
    squatter.bind((cip, SVC_PORT))
    squatter.listen()
    key = ListenerKey("TCP", cip, SVC_PORT)
    try:
        await env.client.create(service("late", cip))
        await env.client.create(kube_slice("late", [a.host]))
        await eventually(lambda: env.proxy.stats.bind_failures >= 2)
        assert not env.proxy.is_listening(key)
        squatter.close()
        await env.listening(key, backends=1)
        assert (await tcp_ask(cip, SVC_PORT)).startswith("a|")
    finally:
        squatter.close()
        await a.stop()


async def test_metrics(env: Env) -> None:
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    cip = env.ip("cip", 10)
    try:
        await env.client.create(service("m", cip))
        await env.client.create(kube_slice("m", [a.host]))
        await env.listening(ListenerKey("TCP", cip, SVC_PORT), backends=1)
        await tcp_ask(cip, SVC_PORT)
        assert env.proxy.health is not None
        async with aiohttp.ClientSession() as s:
            r = await s.get(f"http://127.0.0.1:{env.proxy.health.port}/metrics")
            text = await r.text()
            ready = await s.get(f"http://127.0.0.1:{env.proxy.health.port}/readyz")
            assert ready.status == 200
        line = 'isthmus_proxy_connections_total{kind="ClusterIP",port="http",protocol="TCP",service="shop/m"}'
        assert any(ln.startswith(line) and float(ln.split()[-1]) >= 1 for ln in text.splitlines())
        assert "isthmus_proxy_active_connections" in text and "isthmus_proxy_listeners" in text
    finally:
        await a.stop()


async def test_cluster_ips_work_before_the_mcs_crds_exist(apiserver: RunningApiServer) -> None:
    """A cluster that has not joined (no ServiceImport CRD) still gets its ClusterIPs proxied."""
    client = apiserver.client()
    await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    net = random_net()
    a = await TcpEcho("a", f"127.202.{net}.1", TARGET).start()
    cip = f"127.201.{net}.10"
    await client.create(service("web", cip))
    await client.create(kube_slice("web", [a.host]))
    proxy = ProxyService(client, ProxyConfig(cluster_id="c1", sync_timeout=1))
    await proxy.start()
    try:
        assert not await proxy.wait_ready(2)
        await eventually(lambda: proxy.is_listening(ListenerKey("TCP", cip, SVC_PORT)))
        assert (await tcp_ask(cip, SVC_PORT)).startswith("a|")
        async with asyncio.timeout(30):
            await install_crds(client)
        assert await proxy.wait_ready(20)
    finally:
        await proxy.stop()
        await a.stop()


async def test_vip_locality_follows_the_affinity_annotation_live(env: Env) -> None:
    """isthmus.io/affinity on the ServiceImport (a MultiClusterService's): `local` sends every
    connection to this cluster's pods, `remote` to the others', and a side with no ready endpoint
    falls back to the other; changing the annotation takes effect without a restart."""
    local = await TcpEcho("local", env.ip("pod", 1), TARGET).start()
    remote = await TcpEcho("remote", env.ip("pod", 2), TARGET).start()
    vip = env.ip("vip", 6)
    key = ListenerKey("TCP", vip, SVC_PORT)

    async def affinity(value: str) -> None:
        await env.client.patch(SI, "loc", {"metadata": {"annotations": {"isthmus.io/affinity": value}}},
                               namespace=NS, patch_type=PatchType.MERGE)

    try:
        await env.client.create(service("loc", env.ip("cip", 11)))
        await env.client.create(kube_slice("loc", [local.host]))
        await env.client.create(imported_slice("loc", "c2", [remote.host]))
        await create_import(env.client, "loc", vip, ["c1", "c2"])
        await env.listening(key, backends=2)
        await affinity("local")
        await env.listening(key, backends=1)
        assert await who(vip, SVC_PORT, 4) == {"local": 4}
        await affinity("remote")
        await eventually(lambda: (t := env.proxy.target(key)) is not None
                         and [b.host for b in t.backends] == [remote.host])
        assert await who(vip, SVC_PORT, 4) == {"remote": 4}
        await set_endpoints(env.client, "loc-c2", [])  # no ready remote endpoint: back to this cluster's
        await eventually(lambda: (t := env.proxy.target(key)) is not None
                         and [b.host for b in t.backends] == [local.host])
        assert await who(vip, SVC_PORT, 3) == {"local": 3}
    finally:
        await local.stop()
        await remote.stop()


async def test_vip_local_affinity_falls_back_to_every_remote_cluster_and_unknown_is_none(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """`local` with this cluster's only pod not ready: connections go to the pods of c2 and c3, and
    back to this cluster's pod once it is ready again. `none` and an unknown value balance over every
    cluster; the unknown value is logged once however often the service is rebuilt."""
    caplog.set_level(logging.WARNING, logger="isthmus.proxy.proxy")
    mine = await TcpEcho("mine", env.ip("pod", 11), TARGET).start()
    c2 = await TcpEcho("c2", env.ip("pod", 12), TARGET).start()
    c3 = await TcpEcho("c3", env.ip("pod", 13), TARGET).start()
    vip = env.ip("vip", 7)
    key = ListenerKey("TCP", vip, SVC_PORT)

    async def affinity(value: str) -> None:
        await env.client.patch(SI, "near", {"metadata": {"annotations": {"isthmus.io/affinity": value}}},
                               namespace=NS, patch_type=PatchType.MERGE)

    async def serving(*hosts: str) -> None:
        await eventually(lambda: (t := env.proxy.target(key)) is not None
                         and sorted(b.host for b in t.backends) == sorted(hosts))

    try:
        await env.client.create(service("near", env.ip("cip", 12)))
        await env.client.create(kube_slice("near", [mine.host]))
        await env.client.create(imported_slice("near", "c2", [c2.host]))
        await env.client.create(imported_slice("near", "c3", [c3.host]))
        await create_import(env.client, "near", vip, ["c1", "c2", "c3"])
        await affinity("local")
        await serving(mine.host)
        assert await who(vip, SVC_PORT, 3) == {"mine": 3}
        await env.client.patch(EndpointSlice, "near-abcde", {"endpoints": endpoints(mine.host, ready=False)},
                               namespace=NS, patch_type=PatchType.MERGE)
        await serving(c2.host, c3.host)  # no ready pod here: every other cluster's
        assert await who(vip, SVC_PORT, 4) == {"c2": 2, "c3": 2}
        await set_endpoints(env.client, "near-abcde", [mine.host])
        await serving(mine.host)
        assert await who(vip, SVC_PORT, 2) == {"mine": 2}
        await affinity("none")
        await serving(mine.host, c2.host, c3.host)
        await affinity("nearby")
        await serving(mine.host, c2.host, c3.host)
        await eventually(lambda: any("affinity" in r.getMessage() for r in caplog.records))
        rebuilds = env.proxy.stats.rebuilds
        await env.client.patch(SI, "near", {"metadata": {"labels": {"touched": "yes"}}},
                               namespace=NS, patch_type=PatchType.MERGE)
        await eventually(lambda: env.proxy.stats.rebuilds > rebuilds)  # rebuilt with the same value
        assert await who(vip, SVC_PORT, 6) == {"mine": 2, "c2": 2, "c3": 2}
        warned = [r for r in caplog.records if r.name == "isthmus.proxy.proxy" and "affinity" in r.getMessage()]
        assert [(getattr(r, "service", None), getattr(r, "affinity", None)) for r in warned] == \
            [(f"{NS}/near", "nearby")]
    finally:
        for echo in (mine, c2, c3):
            await echo.stop()


async def prefer_close(env: Env, name: str, host: int) -> None:
    """A ServiceImport with trafficDistribution PreferClose (as copied from the exported Service):
    connections to its VIP go to this cluster's pod while it is ready, to the other cluster's when
    it is not, back once it is ready again; isthmus.io/affinity `none` overrides it."""
    mine = await TcpEcho("mine", env.ip("pod", host), TARGET).start()
    other = await TcpEcho("other", env.ip("pod", host + 1), TARGET).start()
    vip = env.ip("vip", host)
    key = ListenerKey("TCP", vip, SVC_PORT)

    async def serving(*hosts: str) -> None:
        await eventually(lambda: (t := env.proxy.target(key)) is not None
                         and sorted(b.host for b in t.backends) == sorted(hosts))

    try:
        await env.client.create(service(name, env.ip("cip", host)))
        await env.client.create(kube_slice(name, [mine.host]))
        await env.client.create(imported_slice(name, "c2", [other.host]))
        await create_import(env.client, name, vip, ["c1", "c2"], trafficDistribution="PreferClose")
        await serving(mine.host)
        assert await who(vip, SVC_PORT, 6) == {"mine": 6}
        await env.client.patch(EndpointSlice, f"{name}-abcde", {"endpoints": endpoints(mine.host, ready=False)},
                               namespace=NS, patch_type=PatchType.MERGE)
        await serving(other.host)  # no ready pod here: the other cluster's
        assert await who(vip, SVC_PORT, 4) == {"other": 4}
        await set_endpoints(env.client, f"{name}-abcde", [mine.host])
        await serving(mine.host)
        assert await who(vip, SVC_PORT, 4) == {"mine": 4}
        await env.client.patch(SI, name, {"metadata": {"annotations": {"isthmus.io/affinity": "none"}}},
                               namespace=NS, patch_type=PatchType.MERGE)
        await serving(mine.host, other.host)
        assert set(await who(vip, SVC_PORT, 40)) == {"mine", "other"}
    finally:
        await mine.stop()
        await other.stop()


async def test_vip_prefer_close_serves_this_cluster_first_and_falls_back(env: Env) -> None:
    await prefer_close(env, "close", 21)


async def test_unknown_traffic_distribution_balances_over_every_cluster_and_is_logged_once(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="isthmus.proxy.proxy")
    mine = await TcpEcho("mine", env.ip("pod", 31), TARGET).start()
    other = await TcpEcho("other", env.ip("pod", 32), TARGET).start()
    vip = env.ip("vip", 31)
    key = ListenerKey("TCP", vip, SVC_PORT)
    try:
        await env.client.create(service("region", env.ip("cip", 31)))
        await env.client.create(kube_slice("region", [mine.host]))
        await env.client.create(imported_slice("region", "c2", [other.host]))
        await create_import(env.client, "region", vip, ["c1", "c2"], trafficDistribution="PreferSameRegion")
        await env.listening(key, backends=2)
        rebuilds = env.proxy.stats.rebuilds
        await env.client.patch(SI, "region", {"metadata": {"labels": {"touched": "yes"}}},
                               namespace=NS, patch_type=PatchType.MERGE)
        await eventually(lambda: env.proxy.stats.rebuilds > rebuilds)  # rebuilt with the same value
        assert set(await who(vip, SVC_PORT, 40)) == {"mine", "other"}
        warned = [r for r in caplog.records if r.name == "isthmus.proxy.proxy" and "trafficDistribution" in r.getMessage()]
        assert [(getattr(r, "service", None), getattr(r, "distribution", None)) for r in warned] == \
            [(f"{NS}/region", "PreferSameRegion")]
    finally:
        await mine.stop()
        await other.stop()


# --- connect-time balancing (isthmus.proxy.socketlb) ------------------------------------------------


async def scrape(env: Env) -> str:
    assert env.proxy.health is not None
    async with aiohttp.ClientSession() as s:
        r = await s.get(f"http://127.0.0.1:{env.proxy.health.port}/metrics")
        return await r.text()


async def test_connect_time_balancing_sends_clients_straight_to_the_endpoints(lb_env: Env) -> None:
    """A ClusterIP's connect()s go to its endpoints without the listener: spread over both, the
    client's getpeername() shows the ClusterIP, the backend sees the client's own address, the
    kernel's count reaches the metrics, endpoint changes apply to the next connect(), and without
    endpoints the listener resets as before."""
    env = lb_env
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    b = await TcpEcho("b", env.ip("pod", 2), TARGET).start()
    cip = env.ip("cip", 10)
    key = ListenerKey("TCP", cip, SVC_PORT)
    try:
        await env.client.create(service("web", cip))
        await env.client.create(kube_slice("web", [a.host, b.host]))
        await env.listening(key, backends=2)
        assert set(await who(cip, SVC_PORT, 40)) == {"a", "b"}  # random: all 40 on one is 2^-39
        reader, writer = await asyncio.open_connection(cip, SVC_PORT, local_addr=("127.0.0.2", 0))
        assert writer.get_extra_info("peername") == (cip, SVC_PORT)
        writer.write(b"hello\n")
        assert (await asyncio.wait_for(reader.readline(), 5)).split(b"|")[1] == b"127.0.0.2"
        writer.close()
        stats = env.proxy.stats.for_listener("shop/web", "http", "TCP", "ClusterIP")
        assert stats.connections == 0  # the listener saw none of them
        line = 'isthmus_proxy_balanced_connections_total{kind="ClusterIP",port="http",protocol="TCP",service="shop/web"}'
        counted = [float(ln.split()[-1]) for ln in (await scrape(env)).splitlines() if ln.startswith(line)]
        assert counted == [41.0]

        await set_endpoints(env.client, "web-abcde", [b.host])
        await eventually(lambda: env.proxy.backends(key) == (Backend(b.host, TARGET),))
        assert await who(cip, SVC_PORT, 10) == {"b": 10}

        await set_endpoints(env.client, "web-abcde", [])
        await eventually(lambda: env.proxy.backends(key) == ())
        with pytest.raises((ConnectionResetError, ConnectionError)):
            await tcp_ask(cip, SVC_PORT)
        assert stats.no_endpoints == 1  # the listener took it
        counted = [float(ln.split()[-1]) for ln in (await scrape(env)).splitlines() if ln.startswith(line)]
        assert counted == [51.0]  # kept after the kernel stopped balancing the address

        await env.client.delete(Service, "web", namespace=NS)
        await eventually(lambda: key not in env.proxy.listeners)
        with pytest.raises(OSError):
            await tcp_ask(cip, SVC_PORT, timeout=2)
    finally:
        for s in (a, b):
            await s.stop()


async def test_client_ip_affinity_stays_with_the_listener(lb_env: Env) -> None:
    """The kernel does not pin clients: a service with ClientIP affinity is relayed, and pinned."""
    env = lb_env
    a = await TcpEcho("a", env.ip("pod", 1), TARGET).start()
    b = await TcpEcho("b", env.ip("pod", 2), TARGET).start()
    cip = env.ip("cip", 11)
    try:
        await env.client.create(service("sticky", cip, sessionAffinity="ClientIP"))
        await env.client.create(kube_slice("sticky", [a.host, b.host]))
        await env.listening(ListenerKey("TCP", cip, SVC_PORT), backends=2)
        assert len(await who(cip, SVC_PORT, 6, source="127.0.0.3")) == 1
        assert env.proxy.stats.for_listener("shop/sticky", "http", "TCP", "ClusterIP").connections == 6
    finally:
        for s in (a, b):
            await s.stop()


async def test_prefer_close_in_the_kernel(lb_env: Env) -> None:
    """Connect-time balancing picks from the same preferred set: the listener sees none of it."""
    await prefer_close(lb_env, "close-lb", 41)
    assert lb_env.proxy.stats.for_listener("shop/close-lb", "http", "TCP", "ClusterSetIP").connections == 0
