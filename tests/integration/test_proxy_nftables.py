"""`isthmus proxy --mode nftables` with real packets, in a network namespace made here.

The proxy runs in the test process against an embedded apiserver and programs its tables inside
the namespace (`ip netns exec`); the backends and the clients are small Python processes in that
namespace, so every rule the test writes lives and dies with it. Backends answer with their own
address and the client address they see: with the kernel translating, they see the client itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType
from prometheus_client import generate_latest

from isthmus.kube.helpers import install_crds
from isthmus.proxy import Backend, ListenerKey, ProxyConfig, ProxyService, Target
from isthmus.proxy.nftables import TABLE, NftablesDataplane, render
from isthmus.runtime import REGISTRY
from tests.harness.apiserver import RunningApiServer
from tests.harness.polling import eventually
from tests.harness.proxy import (
    NS,
    SVC_PORT,
    TARGET,
    create_import,
    imported_slice,
    kube_slice,
    service,
)

ROOTLESS = os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None
TIMEOUT = 20
CIP, VIP = "127.201.9.1", "127.205.9.1"
POD_A, POD_B, CLIENT_1, CLIENT_2 = "127.202.9.1", "127.202.9.2", "127.203.9.1", "127.203.9.2"

SERVERS = r"""
import socket, sys, threading, time
port = int(sys.argv[1])
def tcp(addr):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, port)); s.listen(64)
    while True:
        c, peer = s.accept()
        try:
            c.sendall(f"{addr}|{peer[0]}".encode())
        except OSError:
            pass
        c.close()
def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((addr, port))
    while True:
        _, peer = s.recvfrom(100)
        s.sendto(f"{addr}|{peer[0]}".encode(), peer)
for a in sys.argv[2:]:
    for f in (tcp, udp):
        threading.Thread(target=f, args=(a,), daemon=True).start()
print("ready", flush=True)
time.sleep(120)
"""

CLIENT = r"""
import json, socket, sys
# Commands on stdin, one answer line each: "tcp SRC HOST PORT N" (N connections), "udp HOST PORT"
# (a datagram from this process's one UDP socket, so every one is the same flow).
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((sys.argv[1], 0)); u.settimeout(2)
for line in sys.stdin:
    cmd = line.split()
    out = []
    if cmd[0] == "tcp":
        for _ in range(int(cmd[4])):
            s = socket.socket(); s.settimeout(2); s.bind((cmd[1], 0))
            try:
                s.connect((cmd[2], int(cmd[3]))); out.append(s.recv(100).decode())
            except OSError as e:
                out.append(type(e).__name__)
            s.close()
    else:
        try:
            u.sendto(b"?", (cmd[1], int(cmd[2]))); out.append(u.recv(100).decode())
        except OSError as e:
            out.append(type(e).__name__)
    print(json.dumps(out), flush=True)
"""

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(ROOTLESS, reason="needs root (a network namespace) and nft/ip installed")]


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=check)


@dataclass
class Netns:
    name: str
    procs: list[subprocess.Popen[str]]

    def start(self, script: str, *args: str) -> subprocess.Popen[str]:
        p = subprocess.Popen(["ip", "netns", "exec", self.name, sys.executable, "-c", script, *args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def nft(self) -> str:
        return sh("ip", "netns", "exec", self.name, "nft", "list", "ruleset").stdout


class Client:
    def __init__(self, ns: Netns, udp_source: str) -> None:
        self.proc = ns.start(CLIENT, udp_source)

    def ask(self, command: str) -> list[str]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer: list[str] = json.loads(self.proc.stdout.readline())
        return answer

    def tcp(self, source: str, host: str, port: int, n: int) -> list[str]:
        return self.ask(f"tcp {source} {host} {port} {n}")

    def udp(self, host: str, port: int) -> str:
        return self.ask(f"udp {host} {port}")[0]


@pytest.fixture
def netns() -> Iterator[Netns]:
    ns = Netns(f"isthmus-px-{uuid.uuid4().hex[:8]}", [])
    sh("ip", "netns", "add", ns.name)
    try:
        sh("ip", "-n", ns.name, "link", "set", "lo", "up")
        servers = ns.start(SERVERS, str(TARGET), POD_A, POD_B)
        assert servers.stdout and servers.stdout.readline().strip() == "ready"
        yield ns
    finally:
        for p in ns.procs:
            p.kill()  # by PID: `ip netns exec` execs python in place
            p.wait(5)
        sh("ip", "netns", "del", ns.name, check=False)


@dataclass
class Env:
    client: AsyncClient
    proxy: ProxyService
    ns: Netns


async def start_proxy(client: AsyncClient, ns: Netns) -> ProxyService:
    proxy = ProxyService(client, ProxyConfig(cluster_id="c1", node_address="127.0.0.1", mode="nftables",
                                             bind_backoff_base=0.05, check_every=0.2),
                         dataplane=NftablesDataplane(netns=ns.name))
    await proxy.start()
    assert await proxy.wait_ready(20)
    return proxy


@pytest.fixture
async def env(apiserver: RunningApiServer, netns: Netns) -> AsyncIterator[Env]:
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    proxy = await start_proxy(client, netns)
    try:
        yield Env(client, proxy, netns)
    finally:
        await proxy.stop()


async def served(env: Env, key: ListenerKey, backends: int) -> None:
    def ok() -> bool:
        got = env.proxy.backends(key)
        return env.proxy.is_listening(key) and got is not None and len(got) == backends
    await eventually(ok)


def servers(answers: list[str]) -> Counter[str]:
    return Counter(a.split("|")[0] for a in answers)


async def test_cluster_ip_and_node_port_are_translated_in_the_kernel(env: Env) -> None:
    await env.client.create(service("web", CIP, type="NodePort", ports=[
        {"name": "http", "port": SVC_PORT, "targetPort": TARGET, "protocol": "TCP", "nodePort": 30780}]))
    await env.client.create(kube_slice("web", [POD_A, POD_B]))
    key = ListenerKey("TCP", CIP, SVC_PORT)
    await served(env, key, 2)
    client = Client(env.ns, CLIENT_1)
    answers = await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 40)
    # Both endpoints serve, and each sees the client's own address: nothing relays in between.
    assert set(servers(answers)) == {POD_A, POD_B}, answers
    assert {a.split("|")[1] for a in answers} == {CLIENT_1}
    nodeport = await asyncio.to_thread(client.tcp, CLIENT_1, "127.0.0.1", 30780, 10)
    assert set(servers(nodeport)) <= {POD_A, POD_B} and len(nodeport) == 10 and "|" in nodeport[0], nodeport
    # An endpoint that leaves gets no new connection; with none left, connections are refused.
    await env.client.patch(EndpointSlice, "web-abcde", {"endpoints": [
        {"addresses": [POD_B], "conditions": {"ready": True}}]}, namespace=NS, patch_type=PatchType.MERGE)
    await served(env, key, 1)
    assert set(servers(await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 10))) == {POD_B}
    await env.client.patch(EndpointSlice, "web-abcde", {"endpoints": [
        {"addresses": [POD_B], "conditions": {"ready": False}}]}, namespace=NS, patch_type=PatchType.MERGE)
    await served(env, key, 0)
    assert await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 2) == ["ConnectionRefusedError"] * 2
    assert env.proxy.stats.syncs >= 3 and env.proxy.stats.sync_failures == 0
    scraped = generate_latest(REGISTRY).decode()
    assert 'isthmus_proxy_nftables_syncs_total{result="ok"}' in scraped


async def test_rules_flushed_by_someone_else_are_written_again(env: Env) -> None:
    await env.client.create(service("web", CIP))
    await env.client.create(kube_slice("web", [POD_A]))
    await served(env, ListenerKey("TCP", CIP, SVC_PORT), 1)
    client = Client(env.ns, CLIENT_1)
    assert servers(await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 1)) == {POD_A: 1}
    syncs = env.proxy.stats.syncs
    await asyncio.to_thread(sh, "ip", "netns", "exec", env.ns.name, "nft", "flush", "ruleset")
    assert await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 1) != [f"{POD_A}|{CLIENT_1}"]
    await eventually(lambda: env.proxy.stats.syncs > syncs and TABLE in env.ns.nft(), timeout=10)
    assert servers(await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 3)) == {POD_A: 3}


async def test_client_ip_affinity_pins_each_client(env: Env) -> None:
    await env.client.create(service("sticky", CIP, sessionAffinity="ClientIP",
                                    sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}}))
    await env.client.create(kube_slice("sticky", [POD_A, POD_B]))
    await served(env, ListenerKey("TCP", CIP, SVC_PORT), 2)
    client = Client(env.ns, CLIENT_1)
    pinned = set()
    for source in (CLIENT_1, CLIENT_2, *(f"127.203.9.{i}" for i in range(3, 15))):
        got = servers(await asyncio.to_thread(client.tcp, source, CIP, SVC_PORT, 6))
        assert len(got) == 1, got  # every connection of one client reaches one endpoint
        pinned |= set(got)
    assert pinned == {POD_A, POD_B}  # 14 clients at random: both endpoints (1 in 8,192 they'd all match)
    # A later sync (another service) keeps the pins: affinity sets survive a transaction.
    first = servers(await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 1))
    await env.client.create(service("other", "127.201.9.2"))
    await env.client.create(kube_slice("other", [POD_A]))
    await served(env, ListenerKey("TCP", "127.201.9.2", SVC_PORT), 1)
    assert servers(await asyncio.to_thread(client.tcp, CLIENT_1, CIP, SVC_PORT, 8)) == Counter(
        {next(iter(first)): 8})


async def test_a_udp_flow_moves_when_its_endpoint_leaves(env: Env) -> None:
    await env.client.create(service("dns", CIP, ports=[{"name": "dns", "port": 53, "targetPort": TARGET,
                                                         "protocol": "UDP"}]))
    await env.client.create(kube_slice("dns", [POD_A, POD_B], ports=[{"name": "dns", "port": TARGET,
                                                                       "protocol": "UDP"}]))
    key = ListenerKey("UDP", CIP, 53)
    await served(env, key, 2)
    client = Client(env.ns, CLIENT_1)
    first = await asyncio.to_thread(client.udp, CIP, 53)
    endpoint, seen_as = first.split("|")
    assert endpoint in (POD_A, POD_B) and seen_as == CLIENT_1
    assert {await asyncio.to_thread(client.udp, CIP, 53) for _ in range(5)} == {first}  # one flow, one endpoint
    other = POD_B if endpoint == POD_A else POD_A
    await env.client.patch(EndpointSlice, "dns-abcde", {"endpoints": [
        {"addresses": [other], "conditions": {"ready": True}}]}, namespace=NS, patch_type=PatchType.MERGE)
    await served(env, key, 1)
    # The same socket (the same conntrack entry, had it not been deleted) now reaches the other one.
    assert (await asyncio.to_thread(client.udp, CIP, 53)).split("|")[0] == other


async def test_a_vip_balances_over_the_imported_clusters(env: Env) -> None:
    await create_import(env.client, "cart", VIP, ["c2", "c3"])
    await env.client.create(imported_slice("cart", "c2", [POD_A]))
    await env.client.create(imported_slice("cart", "c3", [POD_B]))
    await served(env, ListenerKey("TCP", VIP, SVC_PORT), 2)
    client = Client(env.ns, CLIENT_1)
    assert set(servers(await asyncio.to_thread(client.tcp, CLIENT_1, VIP, SVC_PORT, 40))) == {POD_A, POD_B}


async def test_prefer_close_keeps_a_vip_in_this_cluster_until_its_pods_go(env: Env) -> None:
    """trafficDistribution PreferClose on the import: the kernel's rules send every connection to
    this cluster's pod, and to the other cluster's once it is not ready."""
    await env.client.create(service("near", "127.201.9.2"))
    await env.client.create(kube_slice("near", [POD_A]))
    await env.client.create(imported_slice("near", "c2", [POD_B]))
    await create_import(env.client, "near", VIP, ["c1", "c2"], trafficDistribution="PreferClose")
    key = ListenerKey("TCP", VIP, SVC_PORT)
    await eventually(lambda: env.proxy.backends(key) == (Backend(POD_A, TARGET),))
    client = Client(env.ns, CLIENT_1)
    assert servers(await asyncio.to_thread(client.tcp, CLIENT_1, VIP, SVC_PORT, 20)) == {POD_A: 20}
    await env.client.patch(EndpointSlice, "near-abcde", {"endpoints": [
        {"addresses": [POD_A], "conditions": {"ready": False}}]}, namespace=NS, patch_type=PatchType.MERGE)
    await eventually(lambda: env.proxy.backends(key) == (Backend(POD_B, TARGET),))
    assert servers(await asyncio.to_thread(client.tcp, CLIENT_1, VIP, SVC_PORT, 20)) == {POD_B: 20}


async def test_restart_replaces_leftovers_and_stop_removes_the_tables(apiserver: RunningApiServer,
                                                                      netns: Netns) -> None:
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)
    await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    await client.create(service("web", CIP))
    await client.create(kube_slice("web", [POD_A]))
    # A previous run's table with a rule that would send the ClusterIP elsewhere.
    stale = render({ListenerKey("TCP", CIP, SVC_PORT): Target("x/y", "http", "ClusterIP", (Backend(POD_B, TARGET),))}).script
    await asyncio.to_thread(subprocess.run, ["ip", "netns", "exec", netns.name, "nft", "-f", "-"], input=stale,
                            text=True, check=True, timeout=TIMEOUT)
    proxy = await start_proxy(client, netns)
    try:
        await eventually(lambda: proxy.is_listening(ListenerKey("TCP", CIP, SVC_PORT)))
        c = Client(netns, CLIENT_1)
        assert set(servers(await asyncio.to_thread(c.tcp, CLIENT_1, CIP, SVC_PORT, 10))) == {POD_A}
        assert netns.nft().count("dnat to") == 1
    finally:
        await proxy.stop()
    assert TABLE not in netns.nft()


def test_render_writes_only_what_changed() -> None:
    a, b = Backend(POD_A, TARGET), Backend(POD_B, TARGET)
    key, other = ListenerKey("TCP", CIP, SVC_PORT), ListenerKey("TCP", "127.201.9.2", SVC_PORT)
    sticky = {key: Target("shop/web", "http", "ClusterIP", (a, b), affinity_timeout=60),
              other: Target("shop/api", "http", "ClusterIP", (a, b))}
    one = render(sticky)
    assert "delete table ip isthmus_proxy" in one.script  # nothing known: replaced whole
    assert render(sticky, programmed=one.programmed).script == ""  # nothing changed, nothing written
    # One endpoint of the sticky service leaves: only its chains and sets are written or deleted.
    two = render({**sticky, key: Target("shop/web", "http", "ClusterIP", (a,), affinity_timeout=60)},
                 programmed=one.programmed)
    assert "delete table" not in two.script and "127.201.9.2" not in two.script
    before, after = one.programmed[key], two.programmed[key]
    assert after.svc == before.svc and set(after.eps) < set(before.eps) and set(after.sets) < set(before.sets)
    for gone in (set(before.eps) - set(after.eps)) | (set(before.sets) - set(after.sets)):
        assert f" {gone}\n" in two.script and "delete" in two.script.split(gone)[0].rsplit("\n", 1)[-1]
    # A port left with no endpoint moves from the services map to the reject set.
    three = render({**sticky, other: Target("shop/api", "http", "ClusterIP", ())}, programmed=one.programmed)
    assert f"delete element ip isthmus_proxy services {{ 127.201.9.2 . tcp . {SVC_PORT} }}" in three.script
    assert f"add element ip isthmus_proxy no-endpoints {{ 127.201.9.2 . tcp . {SVC_PORT} }}" in three.script
    # IPv6 goes to the ip6 table; an endpoint of the other family is left out.
    v6 = render({ListenerKey("UDP", "fd00::1", 53): Target("shop/dns", "dns", "ClusterIP",
                                                           (Backend("fd00::2", 5353),))})
    assert "dnat to [fd00::2]:5353" in v6.script and "add element ip6 isthmus_proxy services { fd00::1 . udp . 53" in v6.script
    mixed = render({key: Target("shop/web", "http", "ClusterIP", (Backend("fd00::2", 80), a))})
    assert "fd00::2" not in mixed.script and f"dnat to {POD_A}:{TARGET}" in mixed.script
    only_v6 = render({key: Target("shop/web", "http", "ClusterIP", (Backend("fd00::2", 80),))})
    assert f"add element ip isthmus_proxy no-endpoints {{ {CIP} . tcp . {SVC_PORT} }}" in only_v6.script
    with pytest.raises(ValueError, match="TCP or UDP"):
        render({ListenerKey("SCTP", CIP, 9): Target("shop/web", "x", "ClusterIP", (a,))})


def test_thousands_of_services_sync_in_one_transaction_then_by_change() -> None:
    """No anonymous set or map per service (nft names each by scanning the others): the script
    for 3,000 service ports carries none, and a later change writes only its own lines."""
    many = {ListenerKey("TCP", f"127.201.{i // 250}.{i % 250 + 1}", 80):
            Target(f"shop/s{i}", "http", "ClusterIP", (Backend(POD_A, TARGET), Backend(POD_B, TARGET)))
            for i in range(3000)}
    first = render(many)
    assert " map {" not in first.script and " vmap {" not in first.script and "saddr {" not in first.script
    key = next(iter(many))
    changed = render({**many, key: Target("shop/s0", "http", "ClusterIP", (Backend(POD_A, TARGET),))},
                     programmed=first.programmed)
    assert changed.script.count("\n") < 10


async def test_a_refused_transaction_is_retried_and_the_proxy_is_not_ready(apiserver: RunningApiServer,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)
    proxy = ProxyService(client, ProxyConfig(cluster_id="c1", mode="nftables", bind_backoff_base=0.05),
                         dataplane=NftablesDataplane(nft="false"))  # an nft that refuses every script
    await proxy.start()
    try:
        assert not await proxy.wait_ready(1.5)
        assert proxy.stats.sync_failures >= 2 and proxy.stats.syncs == 0 and not proxy.ready
        assert "applying the nftables rules failed; retrying" in caplog.text
    finally:
        await proxy.stop()
