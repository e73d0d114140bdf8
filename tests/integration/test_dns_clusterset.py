"""`isthmus dns` fed by the real discovery agent: services exported in c1 and c2, resolved in c3
(and in c1, for local preference), over real sockets with dnspython."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import dns.asyncquery
import dns.message
import dns.rcode
import pytest
import pytest_asyncio

from isthmus.apiserver.registry.service import default_service
from isthmus.dns.service import DnsConfig, DnsService
from tests.harness.clusterset import ClusterSet, as_dict, endpoint_slice, ips_of, service, service_export

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

Z = "clusterset.local"


class Resolver:
    def __init__(self, svc: DnsService) -> None:
        self.svc = svc
        self.host, self.port = svc.bound[0]

    async def q(self, name: str, rdtype: str = "A") -> dns.message.Message:
        msg = dns.message.make_query(name, rdtype)
        return await dns.asyncquery.udp(msg, self.host, port=self.port, timeout=3)

    async def addrs(self, name: str) -> list[str]:
        return sorted(rr.address for rrset in (await self.q(name)).answer for rr in rrset)

    async def eventually(self, name: str, check: Any, within: float = 20.0) -> list[str]:
        """Poll until check(sorted addresses seen over 4 queries, as a set) holds."""
        end = time.monotonic() + within
        while True:
            seen = sorted({a for _ in range(4) for a in await self.addrs(name)})
            if check(seen):
                return seen
            if time.monotonic() > end:
                raise AssertionError(f"{name}: {seen}")
            await asyncio.sleep(0.05)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[ClusterSet, Resolver, Resolver]]:
    async with ClusterSet(tmp_path_factory.mktemp("dns"), n=3) as cs:
        services = []
        try:
            for i in (0, 2):
                svc = DnsService(cs.c(i), DnsConfig(cluster_id=cs.clusters[i].id, listen=[("127.0.0.1", 0)]))
                await svc.start()
                services.append(svc)
                assert await svc.wait_ready(20)
            yield cs, Resolver(services[0]), Resolver(services[1])
        finally:
            for svc in services:
                await svc.stop()


async def _ns(cs: ClusterSet, ns: str) -> None:
    for i in range(3):
        await cs.ensure_namespace(i, ns)


async def test_no_vip_round_robin_in_c3_local_preference_in_c1(
    env: tuple[ClusterSet, Resolver, Resolver],
) -> None:
    cs, dns1, dns3 = env
    ns = "rr"
    await _ns(cs, ns)
    await cs.export(
        0, "web", ns, svc=service("web", ns, cluster_ip="127.10.1.5"), endpoints=[("127.20.1.1", True)]
    )
    await cs.export(
        1, "web", ns, svc=service("web", ns, cluster_ip="127.10.2.5"), endpoints=[("127.20.2.1", True)]
    )
    name = f"web.{ns}.svc.{Z}"
    await dns3.eventually(name, lambda seen: seen == ["127.10.1.5", "127.10.2.5"])
    answers = [tuple(await dns3.addrs(name)) for _ in range(4)]
    assert all(len(a) == 1 for a in answers) and answers[0] != answers[1]  # one cluster per answer, rotating
    await dns1.eventually(name, lambda seen: seen == ["127.10.1.5"])  # c1 exports with a ready endpoint
    (srv,) = (await dns3.q(f"_http._tcp.{name}", "SRV")).answer
    assert [(r.port, str(r.target)) for r in srv] == [(80, name + ".")]
    # c2's only endpoint becomes not ready: c3 answers c1's ClusterIP only
    await cs.put(1, endpoint_slice("web", ns, [("127.20.2.1", False)]))
    await dns3.eventually(name, lambda seen: seen == ["127.10.1.5"])
    # c1 stops exporting: c3 has nobody ready (NODATA), then c2 recovers
    await cs.unexport(0, "web", ns)
    await dns3.eventually(name, lambda seen: seen == [])
    await cs.put(1, endpoint_slice("web", ns, [("127.20.2.1", True)]))
    await dns3.eventually(name, lambda seen: seen == ["127.10.2.5"])
    await cs.unexport(1, "web", ns)
    end = time.monotonic() + 20
    while (await dns3.q(name)).rcode() != dns.rcode.NXDOMAIN:
        assert time.monotonic() < end, "import never went away"
        await asyncio.sleep(0.05)


async def test_vip_service(env: tuple[ClusterSet, Resolver, Resolver]) -> None:
    cs, _, dns3 = env
    ns = "vip"
    await _ns(cs, ns)
    await cs.export(0, "api", ns, svc=service("api", ns, cluster_ip="127.10.1.6"), use_clusterset_ip="true")
    await cs.export(1, "api", ns, svc=service("api", ns, cluster_ip="127.10.2.6"), use_clusterset_ip="true")

    async def vip() -> list[str]:
        end = time.monotonic() + 20
        while True:
            si = await cs.local_import(2, "api", ns)
            if si and ips_of(si):
                return ips_of(si)
            assert time.monotonic() < end, "no VIP on c3's ServiceImport"
            await asyncio.sleep(0.1)

    want = await vip()
    await dns3.eventually(f"api.{ns}.svc.{Z}", lambda seen: seen == want)
    r = await dns3.q(".".join(reversed(want[0].split("."))) + ".in-addr.arpa", "PTR")
    assert [str(p.target) for p in r.answer[0]] == [f"api.{ns}.svc.{Z}."]


async def test_headless_with_hostnames(env: tuple[ClusterSet, Resolver, Resolver]) -> None:
    cs, _, dns3 = env
    ns = "hl"
    await _ns(cs, ns)
    await cs.export(
        0, "db", ns, svc=service("db", ns, headless=True), endpoints=[("127.20.1.7", True, "db-0")]
    )
    await cs.export(
        1,
        "db",
        ns,
        svc=service("db", ns, headless=True),
        endpoints=[("127.20.2.7", True, None), ("127.20.2.8", False)],
    )
    name = f"db.{ns}.svc.{Z}"
    await dns3.eventually(name, lambda seen: seen == ["127.20.1.7", "127.20.2.7"])
    assert await dns3.addrs(f"db-0.c1.{name}") == ["127.20.1.7"]
    assert await dns3.addrs(f"127-20-2-7.c2.{name}") == ["127.20.2.7"]
    assert (await dns3.q(f"127-20-2-8.c2.{name}")).rcode() == dns.rcode.NXDOMAIN
    (srv,) = (await dns3.q(f"_http._tcp.{name}", "SRV")).answer
    assert sorted((r.port, str(r.target)) for r in srv) == [
        (8080, f"127-20-2-7.c2.{name}."),
        (8080, f"db-0.c1.{name}."),
    ]


async def test_affinity_steers_answers_through_the_real_server(env: tuple[ClusterSet, Resolver, Resolver]) -> None:
    """isthmus.io/affinity travels as an exported annotation (what a MultiClusterService's exports
    carry) and c1's DNS server applies it: remote → the other cluster's ClusterIP, falling back to
    c1's own when nothing else is ready; headless + local → c1's pods only."""
    cs, dns1, _ = env
    ns = "aff"
    await _ns(cs, ns)
    remote = {"isthmus.io/affinity": "remote"}
    await cs.export(0, "web", ns, svc=service("web", ns, cluster_ip="127.10.3.5"), endpoints=[("127.20.3.1", True)],
                    exported_annotations=remote)
    await cs.export(1, "web", ns, svc=service("web", ns, cluster_ip="127.10.4.5"), endpoints=[("127.20.4.1", True)],
                    exported_annotations=remote)
    name = f"web.{ns}.svc.{Z}"
    await dns1.eventually(name, lambda seen: seen == ["127.10.4.5"])  # c2's, not c1's own
    await cs.put(1, endpoint_slice("web", ns, [("127.20.4.1", False)]))
    await dns1.eventually(name, lambda seen: seen == ["127.10.3.5"])  # nothing ready remotely: c1's
    local = {"isthmus.io/affinity": "local"}
    for i, pod in ((0, "127.20.5.1"), (1, "127.20.6.1")):
        await cs.export(i, "db", ns, svc=service("db", ns, headless=True), endpoints=[(pod, True)],
                        exported_annotations=local)
    await dns1.eventually(f"db.{ns}.svc.{Z}", lambda seen: seen == ["127.20.5.1"])


async def test_headless_affinity_local_fallback_live_change_and_unknown_value(
    env: tuple[ClusterSet, Resolver, Resolver], caplog: pytest.LogCaptureFixture
) -> None:
    """c1's DNS server under `local`: the headless name and its SRV list c1's pod only, c2's pod
    still resolves by its own name; c1's pod not ready → c2's; `remote` takes effect live; an
    unknown value answers as none and is logged once, however often the service is rebuilt."""
    caplog.set_level(logging.WARNING, logger="isthmus.dns.source")
    cs, dns1, _ = env
    ns = "aff-hl"
    await _ns(cs, ns)

    async def export(affinity: str, c1_ready: bool = True) -> None:
        for i, pod, ready in ((0, "127.20.7.1", c1_ready), (1, "127.20.8.1", True)):
            await cs.export(i, "db", ns, svc=service("db", ns, headless=True),
                            endpoints=[(pod, ready, f"db-{i}")], exported_annotations={"isthmus.io/affinity": affinity})

    name = f"db.{ns}.svc.{Z}"
    await export("local")
    await dns1.eventually(f"db-1.c2.{name}", lambda seen: seen == ["127.20.8.1"])  # a peer by name: never hidden
    assert await dns1.addrs(name) == ["127.20.7.1"]
    (srv,) = (await dns1.q(f"_http._tcp.{name}", "SRV")).answer
    assert [str(r.target) for r in srv] == [f"db-0.c1.{name}."]
    await export("local", c1_ready=False)
    await dns1.eventually(name, lambda seen: seen == ["127.20.8.1"])  # no ready local pod: c2's
    await export("remote")
    await dns1.eventually(name, lambda seen: seen == ["127.20.8.1"])
    await export("nearby")
    await dns1.eventually(name, lambda seen: seen == ["127.20.7.1", "127.20.8.1"])
    await export("nearby", c1_ready=False)  # more rebuilds with the same unknown value
    await dns1.eventually(name, lambda seen: seen == ["127.20.8.1"])
    warned = [r for r in caplog.records if r.name == "isthmus.dns.source" and "affinity" in r.getMessage()
              and (getattr(r, "service", None), getattr(r, "cluster", None)) == (f"{ns}/db", cs.clusters[0].id)]
    assert len(warned) == 1 and getattr(warned[0], "affinity", None) == "nearby"


async def test_prefer_close_from_the_exported_service_steers_headless_answers(
    env: tuple[ClusterSet, Resolver, Resolver],
) -> None:
    """trafficDistribution: PreferClose on the exported Services travels to the ServiceImport, and
    c1's DNS server answers its headless name with c1's pod while it is ready, c2's when it is not;
    c3 (not an exporter) lists both; an explicit isthmus.io/affinity `none` switches it off."""
    cs, dns1, dns3 = env
    ns = "close"
    await _ns(cs, ns)

    async def export(c1_ready: bool = True, annotations: dict[str, str] | None = None) -> None:
        for i, pod, ready in ((0, "127.20.9.1", c1_ready), (1, "127.20.10.1", True)):
            svc = service("db", ns, headless=True)
            assert svc.spec is not None
            svc.spec.trafficDistribution = "PreferClose"
            await cs.export(i, "db", ns, svc=svc, endpoints=[(pod, ready, f"db-{i}")],
                            exported_annotations=annotations)

    name = f"db.{ns}.svc.{Z}"
    await export()
    await dns3.eventually(name, lambda seen: seen == ["127.20.10.1", "127.20.9.1"])
    await dns1.eventually(name, lambda seen: seen == ["127.20.9.1"])
    si = await cs.local_import(0, "db", ns)
    assert si is not None and (si.get("spec") or {}).get("trafficDistribution") == "PreferClose"
    await export(c1_ready=False)
    await dns1.eventually(name, lambda seen: seen == ["127.20.10.1"])  # no ready pod in c1: c2's
    await export(annotations={"isthmus.io/affinity": "none"})
    await dns1.eventually(name, lambda seen: seen == ["127.20.10.1", "127.20.9.1"])


async def test_unknown_traffic_distribution_answers_with_no_preference_logged_once(
    env: tuple[ClusterSet, Resolver, Resolver], caplog: pytest.LogCaptureFixture
) -> None:
    """A value kube refuses today still reaches DNS from a Service stored before the apiserver
    validated trafficDistribution (an upgraded clusterset): no preference, one warning."""
    caplog.set_level(logging.WARNING, logger="isthmus.dns.source")
    cs, dns1, _ = env
    ns = "region"
    await _ns(cs, ns)
    for i in (0, 1):
        legacy = as_dict(service("db", ns, headless=True))
        legacy["spec"]["trafficDistribution"] = "PreferSameRegion"
        legacy["metadata"] |= {"uid": f"legacy-db-{i}", "creationTimestamp": "2026-12-01T00:00:00Z"}
        default_service(legacy)  # stored as the older server stored it: defaulted, not validated
        cs.clusters[i].server.store.create("/services", legacy)
        await cs.put(i, service_export("db", ns))

    async def export(c2_ready: bool = True) -> None:
        for i, pod, ready in ((0, "127.20.11.1", True), (1, "127.20.12.1", c2_ready)):
            await cs.put(i, endpoint_slice("db", ns, [(pod, ready, f"db-{i}")]))

    name = f"db.{ns}.svc.{Z}"
    await export()
    await dns1.eventually(name, lambda seen: seen == ["127.20.11.1", "127.20.12.1"])
    await export(c2_ready=False)  # more rebuilds with the same value
    await dns1.eventually(name, lambda seen: seen == ["127.20.11.1"])
    warned = [r for r in caplog.records if r.name == "isthmus.dns.source" and "trafficDistribution" in r.getMessage()
              and (getattr(r, "service", None), getattr(r, "cluster", None)) == (f"{ns}/db", cs.clusters[0].id)]
    assert len(warned) == 1 and getattr(warned[0], "distribution", None) == "PreferSameRegion"
