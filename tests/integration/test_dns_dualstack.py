"""AAAA beside A (docs/dns.md "Dual-stack"): a ClusterSetIP import with an IPv4 and an IPv6 VIP answers
both, a headless import answers AAAA from its IPv6 EndpointSlices; over real UDP and TCP sockets on
127.0.0.1 (IPv6 addresses are answer data only: nothing is configured on the host)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import dns.rcode
import dns.rdatatype
import pytest

from isthmus.dns.service import DnsConfig, DnsService
from tests.integration.test_dns_server import (
    NS,
    Dns,
    Z,
    _prepare,
    create_import,
    imported_slice,
    service_import,
)

pytestmark = pytest.mark.timeout(60)


def v6_slice(svc: str, cluster: str, endpoints: list[tuple[str, bool, str | None]], port: int = 8080) -> Any:
    s = imported_slice(svc, cluster, endpoints, port)
    assert s.metadata is not None
    s.metadata.name = f"{svc}-{cluster}-v6"
    s.addressType = "IPv6"
    return s


@pytest.fixture
async def server(apiserver: Any) -> AsyncIterator[Dns]:
    client = await _prepare(apiserver)
    dual = service_import("dual", ips=["243.0.0.8", "fd00:243::8"], clusters=("c2",))
    dual["spec"]["ipFamilies"] = ["IPv4", "IPv6"]
    await create_import(client, dual)
    v6first = service_import("sixfirst", ips=["fd00:243::9", "243.0.0.9"], clusters=("c2",))
    v6first["spec"]["ipFamilies"] = ["IPv6", "IPv4"]
    await create_import(client, v6first)
    await create_import(client, service_import("hdual", "Headless", clusters=("c2",)))
    await client.create(imported_slice("hdual", "c2", [("127.2.0.5", True, "web-0"), ("127.2.0.6", True, None)]))
    await client.create(v6_slice("hdual", "c2", [("fd00:2::5", True, "web-0"), ("fd00:2::6", True, None),
                                                 ("fd00:2::7", False, None)]))
    svc = DnsService(client, DnsConfig(cluster_id="c1", listen=[("127.0.0.1", 0)], local_zone="cluster.local",
                                       metrics_addr="127.0.0.1:0"))
    await svc.start()
    try:
        assert await svc.wait_ready(15)
        yield Dns(svc, client)
    finally:
        await svc.stop()


def addresses(r: Any, rdtype: str) -> list[str]:
    want = dns.rdatatype.from_text(rdtype)
    return sorted(rr.address for rrset in r.answer if rrset.rdtype == want for rr in rrset)


@pytest.mark.parametrize("tcp", [False, True])
async def test_dual_stack_vip_answers_a_and_aaaa(server: Dns, tcp: bool) -> None:
    name = f"dual.{NS}.svc.{Z}"
    await server.wait_for(name, ["243.0.0.8"])
    r = await server.q(name, "A", tcp=tcp)
    assert r.rcode() == dns.rcode.NOERROR and addresses(r, "A") == ["243.0.0.8"]
    r = await server.q(name, "AAAA", tcp=tcp)
    assert r.rcode() == dns.rcode.NOERROR and addresses(r, "AAAA") == ["fd00:243::8"]
    # The VIPs' order on the import does not matter to DNS: each family answers its own.
    other = f"sixfirst.{NS}.svc.{Z}"
    assert addresses(await server.q(other, "A", tcp=tcp), "A") == ["243.0.0.9"]
    assert addresses(await server.q(other, "AAAA", tcp=tcp), "AAAA") == ["fd00:243::9"]
    # SRV is per port, not per family: one record naming the service.
    (srv,) = (await server.q(f"_http._tcp.{name}", "SRV", tcp=tcp)).answer
    assert [(s.port, str(s.target)) for s in srv] == [(80, name + ".")]


@pytest.mark.parametrize("tcp", [False, True])
async def test_headless_answers_aaaa_from_ipv6_slices(server: Dns, tcp: bool) -> None:
    name = f"hdual.{NS}.svc.{Z}"
    await server.wait_for(name, ["fd00:2::5", "fd00:2::6"], "AAAA")
    assert addresses(await server.q(name, "A", tcp=tcp), "A") == ["127.2.0.5", "127.2.0.6"]
    assert addresses(await server.q(name, "AAAA", tcp=tcp), "AAAA") == ["fd00:2::5", "fd00:2::6"]  # not the unready one
    host = f"web-0.c2.{name}"
    assert addresses(await server.q(host, "A", tcp=tcp), "A") == ["127.2.0.5"]
    assert addresses(await server.q(host, "AAAA", tcp=tcp), "AAAA") == ["fd00:2::5"]
