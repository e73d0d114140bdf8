"""`isthmus dns` against an embedded apiserver, queried over real sockets with dnspython.

Objects are written by hand per docs/discovery.md (what the agent writes); test_dns_clusterset.py
has the same answers with imports written by the real agent.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

from isthmus.api.mcs import (
    KUBE_SERVICE_NAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    ServiceImport,
)
from isthmus.dns.service import DnsConfig, DnsService
from isthmus.kube.helpers import install_crds
from isthmus.kube.resources import resource_for
from tests.harness.ports import free_port

pytestmark = pytest.mark.timeout(60)

SI = resource_for(ServiceImport)
NS = "shop"
Z = "clusterset.local"


# --- object builders (the contract's shapes) --------------------------------------------------------


def service_import(
    name: str, type_: str = "ClusterSetIP", ips: list[str] | None = None, clusters: tuple[str, ...] = ("c2",),
    ports: list[dict[str, Any]] | None = None,
) -> Any:  # fmt: skip
    spec: dict[str, Any] = {
        "type": type_,
        "ports": ports if ports is not None else [{"name": "http", "port": 80, "protocol": "TCP"}],
    }
    if ips:
        spec["ips"] = ips
    return SI.from_dict(
        {
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
            "status": {"clusters": [{"cluster": c} for c in clusters]},
        }
    )


async def create_import(client: AsyncClient, obj: Any) -> None:
    """Create, then write status.clusters through the status subresource (as the agent does)."""
    await client.create(obj)
    await client.patch(
        SI.Status, obj.metadata.name, {"status": obj["status"]}, namespace=NS, patch_type=PatchType.MERGE
    )


def imported_slice(
    svc: str, cluster: str, endpoints: list[tuple[str, bool, str | None]], port: int = 8080
) -> EndpointSlice:
    return EndpointSlice.from_dict(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{svc}-{cluster}",
                "namespace": NS,
                "labels": {
                    SERVICE_NAME_LABEL: svc,
                    SOURCE_CLUSTER_LABEL: cluster,
                    MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                },
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": [ip], "conditions": {"ready": ready}, **({"hostname": h} if h else {})}
                for ip, ready, h in endpoints
            ],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        }
    )


def kube_service(name: str, cluster_ip: str) -> Service:
    return Service.from_dict(
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterIP": cluster_ip,
                "clusterIPs": [cluster_ip],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            },
        }
    )


def kube_slice(svc: str, endpoints: list[tuple[str, bool, str | None]]) -> EndpointSlice:
    s = imported_slice(svc, "x", endpoints)
    s.metadata.name = f"{svc}-kube"
    s.metadata.labels = {KUBE_SERVICE_NAME_LABEL: svc}
    return s


# --- fixtures ----------------------------------------------------------------------------------------


class Dns:
    def __init__(self, service: DnsService, client: AsyncClient) -> None:
        self.service = service
        self.client = client
        self.host, self.port = service.bound[0]

    async def q(self, name: str, rdtype: str = "A", *, tcp: bool = False, **kw: Any) -> dns.message.Message:
        msg = dns.message.make_query(name, rdtype, **kw)
        if tcp:
            return await dns.asyncquery.tcp(msg, self.host, port=self.port, timeout=3)
        return await dns.asyncquery.udp(msg, self.host, port=self.port, timeout=3)

    async def addrs(self, name: str, rdtype: str = "A") -> list[str]:
        r = await self.q(name, rdtype)
        return sorted(rr.address for rrset in r.answer for rr in rrset)

    async def wait_for(self, name: str, want: list[str], rdtype: str = "A", within: float = 5.0) -> float:
        start = time.monotonic()
        while True:
            got = await self.addrs(name, rdtype)
            if got == sorted(want):
                return time.monotonic() - start
            if time.monotonic() - start > within:
                raise AssertionError(f"{name} {rdtype}: {got}, want {sorted(want)}")
            await asyncio.sleep(0.005)

    async def wait_rcode(
        self, name: str, rcode: dns.rcode.Rcode, rdtype: str = "A", within: float = 5.0
    ) -> None:
        start = time.monotonic()
        while (r := await self.q(name, rdtype)).rcode() != rcode:
            if time.monotonic() - start > within:
                raise AssertionError(
                    f"{name}: {dns.rcode.to_text(r.rcode())}, want {dns.rcode.to_text(rcode)}"
                )
            await asyncio.sleep(0.005)


async def _prepare(apiserver: Any) -> AsyncClient:
    client = apiserver.client()
    async with asyncio.timeout(20):
        await install_crds(client)
    await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    return client


@pytest.fixture
async def server(apiserver: Any) -> AsyncIterator[Dns]:
    client = await _prepare(apiserver)
    # local cluster c1 exports "local" (ClusterIP 127.10.0.1, ready) and the headless "db"
    await create_import(client, service_import("vip", ips=["243.0.0.7"], clusters=("c2",)))
    await create_import(client, service_import("novip", clusters=("c1", "c2", "c3")))
    await client.create(imported_slice("novip", "c2", [("127.2.0.1", True, None)]))
    await client.create(imported_slice("novip", "c3", [("127.3.0.1", True, None)]))
    await client.create(kube_service("novip", "127.10.0.1"))
    await client.create(kube_slice("novip", [("127.20.0.1", False, None)]))  # local not ready
    await create_import(client, service_import("db", "Headless", clusters=("c1", "c2")))
    await client.create(
        imported_slice(
            "db",
            "c2",
            [("127.2.0.5", True, "db-0"), ("127.2.0.6", True, None), ("127.2.0.7", False, None)],
            port=5432,
        )
    )
    await client.create(kube_service("db", "None"))
    await client.create(kube_slice("db", [("127.20.0.5", True, "db-1")]))
    svc = DnsService(
        client,
        DnsConfig(
            cluster_id="c1",
            listen=[("127.0.0.1", 0), ("::1", 0)],
            local_zone="cluster.local",
            metrics_addr="127.0.0.1:0",
        ),
    )
    await svc.start()
    try:
        assert await svc.wait_ready(15)
        yield Dns(svc, client)
    finally:
        await svc.stop()


# --- tests -------------------------------------------------------------------------------------------


async def test_servfail_until_synced_then_answers(apiserver: Any) -> None:
    client = apiserver.client()  # no CRDs yet: the ServiceImport informer cannot list
    await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    svc = DnsService(client, DnsConfig(cluster_id="c1", listen=[("127.0.0.1", 0)]))
    await svc.start()
    try:
        d = Dns(svc, client)
        r = await d.q(f"vip.{NS}.svc.{Z}")
        assert r.rcode() == dns.rcode.SERVFAIL
        assert (await d.q("example.com")).rcode() == dns.rcode.REFUSED
        async with asyncio.timeout(20):
            await install_crds(client)
        await create_import(client, service_import("vip", ips=["243.0.0.7"]))
        assert await svc.wait_ready(20)
        await d.wait_for(f"vip.{NS}.svc.{Z}", ["243.0.0.7"])
    finally:
        await svc.stop()


async def test_vip_answers(server: Dns) -> None:
    name = f"vip.{NS}.svc.{Z}"
    r = await server.q(name)
    assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA and not r.flags & dns.flags.RA
    assert [rr.address for rr in r.answer[0]] == ["243.0.0.7"] and r.answer[0].ttl == 5
    (srv,) = (await server.q(f"_http._tcp.{name}", "SRV")).answer
    assert [(s.priority, s.port, str(s.target)) for s in srv] == [(0, 80, name + ".")]
    r = await server.q(name, "AAAA")
    assert r.rcode() == dns.rcode.NOERROR and not r.answer and r.authority[0].rdtype == dns.rdatatype.SOA
    r = await server.q("7.0.0.243.in-addr.arpa", "PTR")
    assert [str(p.target) for p in r.answer[0]] == [name + "."]
    (txt,) = (await server.q(f"dns-version.{Z}", "TXT")).answer
    assert next(iter(txt)).strings == (b"1.0.0",)


async def test_case_preserved_and_ipv6_listener(server: Dns) -> None:
    msg = dns.message.make_query(f"ViP.{NS.upper()}.svc.ClusterSet.Local", "A")
    host, port = server.service.bound[1]
    assert host == "::1"
    r = await dns.asyncquery.udp(msg, host, port=port, timeout=3)
    assert str(r.question[0].name) == f"ViP.{NS.upper()}.svc.ClusterSet.Local."
    assert str(r.answer[0].name) == f"ViP.{NS.upper()}.svc.ClusterSet.Local."
    assert [rr.address for rr in r.answer[0]] == ["243.0.0.7"]


async def test_no_vip_round_robin_when_local_not_ready_then_local_preferred(server: Dns) -> None:
    name = f"novip.{NS}.svc.{Z}"
    seen = [tuple(await server.addrs(name)) for _ in range(4)]
    assert sorted(set(seen)) == [("127.2.0.1",), ("127.3.0.1",)]
    assert seen[0] != seen[1] and seen[0] == seen[2]
    await server.client.replace(kube_slice("novip", [("127.20.0.1", True, None)]))  # local becomes ready
    await server.wait_for(name, ["127.10.0.1"])
    assert all([await server.addrs(name) == ["127.10.0.1"] for _ in range(3)])


async def test_headless_endpoints_hostnames_and_srv(server: Dns) -> None:
    name = f"db.{NS}.svc.{Z}"
    assert await server.addrs(name) == ["127.2.0.5", "127.2.0.6", "127.20.0.5"]
    assert await server.addrs(f"db-0.c2.{name}") == ["127.2.0.5"]
    assert await server.addrs(f"127-2-0-6.c2.{name}") == ["127.2.0.6"]
    assert await server.addrs(f"db-1.c1.{name}") == ["127.20.0.5"]
    r = await server.q(f"127-2-0-7.c2.{name}")  # not ready: no such host
    assert r.rcode() == dns.rcode.NXDOMAIN
    r = await server.q(f"c2.{name}")  # empty non-terminal without --cluster-names
    assert r.rcode() == dns.rcode.NOERROR and not r.answer
    (srv,) = (await server.q(f"_http._tcp.{name}", "SRV")).answer
    assert sorted((s.port, str(s.target)) for s in srv) == [
        (5432, f"127-2-0-6.c2.{name}."),
        (5432, f"db-0.c2.{name}."),
        (8080, f"db-1.c1.{name}."),
    ]


async def test_local_zone(server: Dns) -> None:
    assert await server.addrs(f"novip.{NS}.svc.cluster.local") == ["127.10.0.1"]
    assert await server.addrs(f"db-1.db.{NS}.svc.cluster.local") == ["127.20.0.5"]
    r = await server.q(f"nothing.{NS}.svc.cluster.local")
    assert r.rcode() == dns.rcode.NXDOMAIN and str(r.authority[0].name) == "cluster.local."


async def test_rcodes_and_no_recursion(server: Dns) -> None:
    r = await server.q(f"missing.{NS}.svc.{Z}")
    assert r.rcode() == dns.rcode.NXDOMAIN and r.flags & dns.flags.AA
    assert r.authority[0].rdtype == dns.rdatatype.SOA
    r = await server.q(f"{NS}.svc.{Z}")
    assert r.rcode() == dns.rcode.NOERROR and not r.answer
    for name in ("example.com", "google.com", "."):
        r = await server.q(name)  # RD is set by default: we must still refuse, never recurse
        assert r.rcode() == dns.rcode.REFUSED and not r.answer and not r.flags & dns.flags.RA
    msg = dns.message.make_query(f"vip.{NS}.svc.{Z}", "A")
    msg.set_opcode(dns.opcode.NOTIFY)
    r = await dns.asyncquery.udp(msg, server.host, port=server.port, timeout=3)
    assert r.rcode() == dns.rcode.NOTIMP
    r = await server.q(f"vip.{NS}.svc.{Z}", use_edns=0, payload=1400)
    assert r.edns == 0 and r.answer


async def test_updates_and_deletions_reflected_quickly(server: Dns) -> None:
    name = f"vip.{NS}.svc.{Z}"
    si = await server.client.get(SI, "vip", namespace=NS)
    si["spec"]["ips"] = ["243.0.0.8"]
    t0 = time.monotonic()
    await server.client.replace(si)
    await server.wait_for(name, ["243.0.0.8"])
    assert time.monotonic() - t0 < 2.0
    assert (await server.q("7.0.0.243.in-addr.arpa", "PTR")).rcode() == dns.rcode.REFUSED  # old VIP gone
    # an endpoint becomes not ready in c2: it leaves the headless answer and its host name
    await server.client.replace(
        imported_slice("db", "c2", [("127.2.0.5", False, "db-0"), ("127.2.0.6", True, None)], port=5432)
    )
    await server.wait_for(f"db.{NS}.svc.{Z}", ["127.2.0.6", "127.20.0.5"])
    await server.wait_rcode(f"db-0.c2.db.{NS}.svc.{Z}", dns.rcode.NXDOMAIN)
    # deleting the import removes every name of the service
    await server.client.delete(SI, "vip", namespace=NS)
    await server.wait_rcode(name, dns.rcode.NXDOMAIN)
    assert (await server.q(f"_http._tcp.{name}", "SRV")).rcode() == dns.rcode.NXDOMAIN
    # a new import appears
    await create_import(server.client, service_import("fresh", ips=["243.0.0.99"]))
    await server.wait_for(f"fresh.{NS}.svc.{Z}", ["243.0.0.99"])


async def test_truncation_then_tcp(server: Dns) -> None:
    eps = [(f"127.4.0.{i}", True, None) for i in range(1, 61)]
    await create_import(server.client, service_import("big", "Headless", clusters=("c2",)))
    await server.client.create(imported_slice("big", "c2", eps))
    name = f"big.{NS}.svc.{Z}"
    start = time.monotonic()
    while True:
        r = await server.q(name)
        if r.flags & dns.flags.TC:
            break
        assert time.monotonic() - start < 5
        await asyncio.sleep(0.01)
    assert not r.answer
    msg = dns.message.make_query(name, "A")
    r, used_tcp = await dns.asyncquery.udp_with_fallback(msg, server.host, port=server.port, timeout=3)
    assert used_tcp and len(r.answer[0]) == 60
    r = await server.q(name, use_edns=0, payload=1232)  # fits in 1232 with EDNS
    assert not r.flags & dns.flags.TC and len(r.answer[0]) == 60


async def test_tcp_pipelining(server: Dns) -> None:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        names = [f"vip.{NS}.svc.{Z}", f"missing.{NS}.svc.{Z}", f"db-0.c2.db.{NS}.svc.{Z}"]
        msgs = [dns.message.make_query(n, "A") for n in names]
        payload = b"".join(struct.pack(">H", len(w)) + w for w in (m.to_wire() for m in msgs))
        writer.write(payload[:7])  # split mid-message: the server must reassemble
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(payload[7:])
        await writer.drain()
        answers = []
        for _ in msgs:
            size = struct.unpack(">H", await reader.readexactly(2))[0]
            answers.append(dns.message.from_wire(await reader.readexactly(size)))
        assert [a.id for a in answers] == [m.id for m in msgs]
        assert [a.rcode() for a in answers] == [dns.rcode.NOERROR, dns.rcode.NXDOMAIN, dns.rcode.NOERROR]
    finally:
        writer.close()


async def test_malformed_and_random_packets_never_hurt(server: Dns) -> None:
    name = f"vip.{NS}.svc.{Z}"
    before = await server.q(name)

    def blast() -> None:
        @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.binary(max_size=700))
        def fuzz(data: bytes) -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # fresh: no late answer mix-ups
                sock.settimeout(0.02)  # garbage may be dropped: do not wait long for nothing
                sock.sendto(data, (server.host, server.port))
                try:
                    resp, _ = sock.recvfrom(65535)
                except TimeoutError:
                    return
            assert resp[:2] == data[:2] and len(resp) >= 12 and resp[2] & 0x80  # a response to that ID

        fuzz()
        # a valid query with a corrupted question: FORMERR, not a crash
        wire = bytearray(dns.message.make_query(name, "A").to_wire())
        wire[12] = 0xC0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(2)
            sock.sendto(bytes(wire), (server.host, server.port))
            resp, _ = sock.recvfrom(65535)
        assert resp[3] & 0x0F == dns.rcode.FORMERR

    await asyncio.to_thread(blast)
    # TCP garbage too
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"\x00\x05hello\x00\x03abc")
    await writer.drain()
    assert await reader.read(100) == b""  # closed: not a DNS stream
    writer.close()
    after = await server.q(name)
    assert after.answer == before.answer and after.rcode() == dns.rcode.NOERROR


async def test_metrics(server: Dns) -> None:
    await server.q(f"vip.{NS}.svc.{Z}")
    await server.q(f"missing.{NS}.svc.{Z}")
    assert server.service.health is not None
    base = f"http://127.0.0.1:{server.service.health.port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/metrics") as resp:
            body = await resp.text()
        async with http.get(f"{base}/readyz") as resp:
            ready_status = resp.status
    assert 'isthmus_dns_queries_total{qtype="A",rcode="NOERROR"}' in body
    assert 'isthmus_dns_queries_total{qtype="A",rcode="NXDOMAIN"}' in body
    assert "isthmus_dns_cache_hits_total" in body and "isthmus_dns_request_duration_seconds_bucket" in body
    assert ready_status == 200


async def test_cli_process_logs_sync_and_answers(apiserver: Any) -> None:
    import signal
    import sys

    client = await _prepare(apiserver)
    await create_import(client, service_import("vip", ips=["243.0.0.7"]))
    port = free_port(udp=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "dns", "--kubeconfig", apiserver.kubeconfig, "--cluster-id", "c1",
        "--listen", f"127.0.0.1:{port}", "--log-format", "json",
        "--tcp-max-per-source", "1", "--tcp-query-timeout", "30",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        end = time.monotonic() + 20
        msg = dns.message.make_query(f"vip.{NS}.svc.{Z}", "A")
        while True:
            try:
                r = await dns.asyncquery.udp(msg, "127.0.0.1", port=port, timeout=0.5)
                if r.answer:
                    break
            except (dns.exception.Timeout, OSError):
                pass
            if proc.returncode is not None:
                output, _ = await proc.communicate()
                raise AssertionError(f"isthmus dns exited {proc.returncode}: {output.decode()}")
            assert time.monotonic() < end, "isthmus dns did not answer"
            await asyncio.sleep(0.1)
        assert [rr.address for rr in r.answer[0]] == ["243.0.0.7"]
        # the TCP flags reach the server: one connection per address, so a second closes the first
        first = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert await asyncio.wait_for(first[0].read(1), 3) == b""
        except ConnectionResetError:
            pass
        first[1].close()
        wire = msg.to_wire()
        writer.write(struct.pack(">H", len(wire)) + wire)
        size = struct.unpack(">H", await asyncio.wait_for(reader.readexactly(2), 3))[0]
        assert dns.message.from_wire(await reader.readexactly(size)).answer
        writer.close()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(proc.communicate(), 10)
    text = output.decode()
    assert proc.returncode == 0, text
    assert '"msg": "informers synced; answering"' in text or '"msg":"informers synced; answering"' in text
