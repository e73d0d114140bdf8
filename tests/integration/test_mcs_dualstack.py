"""Dual-stack ClusterSet IPs (docs/discovery.md "Dual-stack"): a clusterset whose broker has an IPv4
and an IPv6 range gives every cluster a block of each; a dual-stack Service gets one VIP of each family
in its ipFamilies order, an exporter lacking a family gets IPFamilyConflict, and both VIPs are freed
when the service is unexported. IPv6 addresses are API data only here: nothing is configured."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from lightkube.resources.core_v1 import Service

from isthmus.api.mcs import ConditionType, ConflictReason
from isthmus.discovery import views
from tests.harness.clusterset import ClusterSet, condition, reasons, service
from tests.harness.polling import eventually

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(150)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("dualstack"), n=2, enable_clusterset_ip=True,
                          cidr_range=["243.0.0.0/8", "fd00:243::/48"]) as cs:
        yield cs


def dual_service(name: str, ns: str, families: list[str]) -> Service:
    svc = service(name, ns)
    assert svc.spec is not None
    by_family = {"IPv4": "127.10.0.5", "IPv6": "fd00:10::5"}
    svc.spec.ipFamilies = families
    svc.spec.ipFamilyPolicy = "PreferDualStack" if len(families) == 2 else "SingleStack"
    svc.spec.clusterIP = by_family[families[0]]
    svc.spec.clusterIPs = [by_family[f] for f in families]
    return svc


async def imported(cs: ClusterSet, i: int, name: str, ns: str, n_ips: int) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        imp = await cs.local_import(i, name, ns)
        return imp if imp is not None and len(imp["spec"].get("ips") or []) == n_ips else None

    result: dict[str, Any] = await eventually(check, what=f"{ns}/{name} imported with {n_ips} IPs in c{i + 1}")
    return result


def family(ip: str) -> str:
    return f"IPv{ipaddress.ip_address(ip).version}"


async def test_every_cluster_has_a_block_of_each_family(cs: ClusterSet) -> None:
    assert [m.cluster.spec.clusterset_ip_cidr for m in cs.clusters] == [
        ["243.0.0.0/16", "fd00:243::/64"], ["243.1.0.0/16", "fd00:243:0:1::/64"]]
    assert sorted(cs.clusters[0].agent.aggregator.allocators) == ["IPv4", "IPv6"]


@pytest.mark.parametrize("families", [["IPv4", "IPv6"], ["IPv6", "IPv4"]])
async def test_dual_stack_service_gets_one_vip_per_family_in_order(cs: ClusterSet, families: list[str]) -> None:
    ns = "ds-" + families[0].lower()
    await cs.export(0, "web", ns, svc=dual_service("web", ns, families))
    for i in range(2):
        await cs.ensure_namespace(i, ns)
        imp = await imported(cs, i, "web", ns, 2)
        ips = imp["spec"]["ips"]
        assert imp["spec"]["ipFamilies"] == families
        assert [family(ip) for ip in ips] == families
        by_family = dict(zip(families, ips, strict=True))
        assert ipaddress.ip_address(by_family["IPv4"]) in ipaddress.ip_network("243.0.0.0/16")
        assert ipaddress.ip_address(by_family["IPv6"]) in ipaddress.ip_network("fd00:243::/64")
        ready = condition(imp, ConditionType.READY) or {}
        assert (ready.get("status"), ready.get("reason")) == ("True", "Ready"), ready


async def test_exporter_lacking_a_family_gets_ip_family_conflict(cs: ClusterSet) -> None:
    ns = "ds-conflict"
    await cs.export(0, "api", ns, svc=dual_service("api", ns, ["IPv4", "IPv6"]))
    await imported(cs, 0, "api", ns, 2)
    await cs.export(1, "api", ns, svc=dual_service("api", ns, ["IPv4"]))

    async def conflicted() -> dict[str, Any] | None:
        se = await cs.get_export(1, "api", ns)
        return se if se is not None and ConflictReason.IP_FAMILY in reasons(se) else None

    se = await eventually(conflicted, what="IPFamilyConflict on c2's export")
    message = (condition(se, ConditionType.CONFLICT) or {}).get("message", "")
    assert ("the Service in cluster c2 has IP families IPv4 but the service is imported as IPv4, IPv6: its "
            "endpoints are not reached over IPv6") in message
    # The import keeps both VIPs: the oldest exporter decided them.
    imp = await imported(cs, 1, "api", ns, 2)
    assert [family(ip) for ip in imp["spec"]["ips"]] == ["IPv4", "IPv6"]


async def test_single_stack_service_in_a_dual_stack_cluster_gets_one_vip(cs: ClusterSet) -> None:
    ns = "ds-single"
    await cs.export(1, "db", ns)
    imp = await imported(cs, 1, "db", ns, 1)
    assert imp["spec"]["ipFamilies"] == ["IPv4"]
    assert ipaddress.ip_address(imp["spec"]["ips"][0]) in ipaddress.ip_network("243.1.0.0/16")


async def test_unexport_frees_both_vips(cs: ClusterSet) -> None:
    ns = "ds-free"
    await cs.export(0, "gone", ns, svc=dual_service("gone", ns, ["IPv4", "IPv6"]))
    ips = (await imported(cs, 0, "gone", ns, 2))["spec"]["ips"]
    allocators = cs.clusters[0].agent.aggregator.allocators
    assert all(allocators[family(ip)].in_use(ip) for ip in ips)
    await cs.unexport(0, "gone", ns)

    async def freed() -> bool:
        return not any(allocators[family(ip)].in_use(ip) for ip in ips)

    await eventually(freed, what=f"{ips} freed")


async def test_show_imports_rows_carry_both_vips_and_the_families(cs: ClusterSet) -> None:
    ns = "ds-show"
    await cs.export(0, "shown", ns, svc=dual_service("shown", ns, ["IPv6", "IPv4"]))
    await cs.ensure_namespace(1, ns)
    imp = await imported(cs, 1, "shown", ns, 2)
    [row] = await views.import_rows(cs.clusters[1].client, ns)
    assert row.ips == imp["spec"]["ips"] and [family(ip) for ip in row.ips] == ["IPv6", "IPv4"]
    assert row.ip_families == ["IPv6", "IPv4"]
    assert row.to_dict()["ipFamilies"] == ["IPv6", "IPv4"] and row.to_dict()["ips"] == row.ips
