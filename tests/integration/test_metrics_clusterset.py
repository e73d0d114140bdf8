"""The clusterset-level metrics have the values the clusterset's state says, scraped from a real
/metrics endpoint while real agents (tests.harness.clusterset: a broker and three member apiservers) and a real
DNS server run: exports by state, conflicts by type, imports, VIP pool usage, heartbeat age and
silence, DNS answers by rcode."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import dns.asyncquery
import dns.message
import dns.rcode
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from isthmus.api.mcs import CLUSTERSET_DOMAIN, ConditionType, ConflictReason
from isthmus.discovery.agent import Agent
from isthmus.dns.service import DnsConfig, DnsService
from isthmus.runtime import HealthServer
from tests.harness.clusterset import SE, ClusterSet, Member, service, service_export
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

GRACE = 2.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class FastGraceClusterSet(ClusterSet):
    """Agents that judge a peer silent after GRACE seconds instead of a minute."""

    async def _start_agent_obj(self, m: Member) -> tuple[Any, asyncio.Task[Any]]:
        agent = await Agent.from_cluster(m.client, m.id, dead_cluster_grace=GRACE)
        return agent, asyncio.create_task(agent.run(), name=f"agent-{m.id}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with FastGraceClusterSet(tmp_path_factory.mktemp("metrics"), n=3, enable_clusterset_ip=True) as cs:
        yield cs


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scrape() -> AsyncIterator[Any]:
    """GET /metrics of a HealthServer on the runtime's registry, as Prometheus would."""
    server = HealthServer()
    await server.start("127.0.0.1:0")
    async with aiohttp.ClientSession() as http:

        async def get() -> Samples:
            async with http.get(f"http://127.0.0.1:{server.port}/metrics") as resp:
                assert resp.status == 200
                text = await resp.text()
            return {(s.name, frozenset(s.labels.items())): s.value
                    for fam in text_string_to_metric_families(text) for s in fam.samples}

        yield get
    await server.stop()


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    want = set(labels.items())
    return {k: v for (n, k), v in samples.items() if n == name and want <= k}


async def until(scrape: Any, check: Any, what: str) -> Samples:
    """Scrape until `check` passes (it asserts), within 15 s."""

    async def ok() -> Samples | None:
        samples: Samples = await scrape()
        check(samples)
        return samples

    result: Samples = await eventually(ok, timeout=15.0, what=what)
    return result


async def test_exports_conflicts_imports_and_vip_usage(cs: ClusterSet, scrape: Any) -> None:
    ns = "metrics-a"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    await cs.export(0, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 80}]), use_clusterset_ip="true")
    await cs.wait_exported(0, "web", ns)
    vip_owner = cs.clusters[0].agent
    # c2 defines port "http" differently: both exporters are in conflict (PortConflict).
    await cs.export(1, "web", ns, svc=service("web", ns, ports=[{"name": "http", "port": 8080}]), use_clusterset_ip="true")
    # c3 exports a Service that does not exist: Valid=False.
    await cs.put(2, service_export("ghost", ns))
    await cs.wait_condition(2, "ghost", ns, ConditionType.VALID, "False")

    def conflicted(s: Samples) -> None:
        assert value(s, "isthmus_exports", cluster="c1", state="conflict") == 1
        assert value(s, "isthmus_exports", cluster="c2", state="conflict") == 1
        assert value(s, "isthmus_exports", cluster="c3", state="invalid") == 1
        assert value(s, "isthmus_exports", cluster="c3", state="valid") == 0
        for c in ("c1", "c2"):
            assert value(s, "isthmus_export_conflicts", cluster=c, type=ConflictReason.PORT) == 1
        assert not series(s, "isthmus_export_conflicts", cluster="c3")
        for c in ("c1", "c2", "c3"):
            assert value(s, "isthmus_imports", cluster=c, type="ClusterSetIP") == 1, c
        assert value(s, "isthmus_clusterset_ips_allocated", cluster="c1", cidr=vip_owner.allocator.cidr) == 1
        assert value(s, "isthmus_clusterset_ips_capacity", cluster="c1",
                     cidr=vip_owner.allocator.cidr) == vip_owner.allocator.size
        assert value(s, "isthmus_clusterset_ips_allocated", cluster="c2",
                     cidr=cs.clusters[1].agent.allocator.cidr) == 0

    await until(scrape, conflicted, "a port conflict on c1 and c2, an invalid export on c3")

    # Resolved: the same port everywhere; the conflict series go, both exports are valid.
    await cs.put(1, service("web", ns, ports=[{"name": "http", "port": 80}]))

    def resolved(s: Samples) -> None:
        for c in ("c1", "c2"):
            assert value(s, "isthmus_exports", cluster=c, state="valid") == 1, c
            assert value(s, "isthmus_exports", cluster=c, state="conflict") == 0, c
            assert not series(s, "isthmus_export_conflicts", cluster=c)

    await until(scrape, resolved, "the conflict resolved")

    # Every export gone: no import left, the VIP back in c1's pool.
    for i in (0, 1):
        await cs.unexport(i, "web", ns)
    await cs.delete(2, SE, "ghost", ns)

    def gone(s: Samples) -> None:
        for c in ("c1", "c2", "c3"):
            assert sum(series(s, "isthmus_exports", cluster=c).values()) == 0, c
            assert sum(series(s, "isthmus_imports", cluster=c).values()) == 0, c
        assert value(s, "isthmus_clusterset_ips_allocated", cluster="c1", cidr=vip_owner.allocator.cidr) == 0

    await until(scrape, gone, "every export withdrawn")


async def test_dns_answers_by_rcode(cs: ClusterSet, scrape: Any) -> None:
    ns = "metrics-dns"
    for i in range(3):
        await cs.ensure_namespace(i, ns)
    await cs.export(0, "api", ns)
    await cs.wait_import(2, "api", ns)
    dns_server = DnsService(cs.c(2), DnsConfig(cluster_id="c3", listen=[("127.0.0.1", 0)]))
    await dns_server.start()
    try:
        assert await dns_server.wait_ready(15)
        host, port = dns_server.bound[0]
        before = await scrape()
        sent: Counter[str] = Counter()  # every answer this test got, by rcode

        async def ask(name: str) -> int:
            q = dns.message.make_query(f"{name}.{ns}.svc.{CLUSTERSET_DOMAIN}", "A")
            rcode = int((await dns.asyncquery.udp(q, host, port=port, timeout=2)).rcode())
            sent[dns.rcode.to_text(dns.rcode.Rcode(rcode))] += 1
            return rcode

        async def answered() -> bool:
            return await ask("api") == dns.rcode.NOERROR

        await eventually(answered, what="api answered by c3's DNS server")
        for _ in range(3):
            assert await ask("missing") == dns.rcode.NXDOMAIN

        def counted(s: Samples) -> None:
            def grew(rcode: str) -> float:
                was = value(before, "isthmus_dns_answers_total", cluster="c3", rcode=rcode) or 0
                return (value(s, "isthmus_dns_answers_total", cluster="c3", rcode=rcode) or 0) - was

            assert sent["NXDOMAIN"] >= 3 and sent["NOERROR"] >= 1
            for rcode, n in sent.items():
                assert grew(rcode) == n, (rcode, grew(rcode), n)

        await until(scrape, counted, "c3's answers counted by rcode")
    finally:
        await dns_server.stop()


async def test_heartbeat_age_and_silence(cs: ClusterSet, scrape: Any) -> None:
    def alive(s: Samples) -> None:
        for c in ("c1", "c2", "c3"):
            ages = series(s, "isthmus_cluster_heartbeat_age_seconds", cluster=c)
            assert {dict(k)["peer"] for k in ages} == {"c1", "c2", "c3"}, c
            assert value(s, "isthmus_cluster_heartbeat_grace_seconds", cluster=c) == GRACE
            silent = series(s, "isthmus_cluster_silent", cluster=c)
            assert {dict(k)["peer"] for k in silent} == {"c1", "c2", "c3"} - {c}
            assert not any(silent.values()), c

    await until(scrape, alive, "every agent sees every peer alive")
    await cs.stop_agent(1)
    try:
        def c2_silent(s: Samples) -> None:
            assert not series(s, "isthmus_exports", cluster="c2"), "a stopped agent reports nothing"
            for c in ("c1", "c3"):
                assert value(s, "isthmus_cluster_silent", cluster=c, peer="c2") == 1, c
                age = value(s, "isthmus_cluster_heartbeat_age_seconds", cluster=c, peer="c2")
                assert age is not None and age > GRACE, (c, age)
                assert value(s, "isthmus_cluster_silent", cluster=c, peer="c1" if c == "c3" else "c3") == 0

        await until(scrape, c2_silent, "c2 judged silent by c1 and c3")
    finally:
        await cs.start_agent(1)

    def back(s: Samples) -> None:
        for c in ("c1", "c3"):
            assert value(s, "isthmus_cluster_silent", cluster=c, peer="c2") == 0, c

    await until(scrape, back, "c2 alive again")
