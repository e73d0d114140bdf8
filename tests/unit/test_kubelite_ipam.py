"""IPAM: pools, ownership, round-robin, rebuild, and the user-facing parse errors."""

from __future__ import annotations

import pytest

from isthmus.local.kubelite.ipam import IPPool, PoolFull, PortPool, parse_cidr, parse_port_range
from isthmus.local.kubelite.services import reserve_existing


def test_ip_pool_allocates_hosts_only_round_robin() -> None:
    pool = IPPool("127.50.0.0/30")  # .1 and .2 usable
    a = pool.allocate("ns/a")
    b = pool.allocate("ns/b")
    assert (a, b) == ("127.50.0.1", "127.50.0.2")
    with pytest.raises(PoolFull):
        pool.allocate("ns/c")
    assert pool.allocate("ns/a") == a  # an owner re-asking gets what it holds
    assert pool.release(a, "ns/other") is False
    assert pool.release(a, "ns/a") is True
    assert pool.allocate("ns/c") == a


def test_round_robin_does_not_reuse_a_released_address_at_once() -> None:
    pool = IPPool("127.50.0.0/24")
    first = pool.allocate("x")
    pool.release_owner("x")
    assert pool.allocate("y") != first


def test_reserve_reports_outside_and_owner() -> None:
    pool = IPPool("127.50.0.0/24")
    assert pool.reserve("127.50.0.7", "ns/a").ok
    assert pool.reserve("127.50.0.7", "ns/a").ok  # idempotent
    res = pool.reserve("127.50.0.7", "ns/b")
    assert not res.ok and res.owner == "ns/a"
    assert pool.reserve("127.51.0.7", "ns/b").outside
    assert pool.reserve("127.50.0.0", "ns/b").outside  # network address
    assert pool.reserve("not-an-ip", "ns/b").outside
    assert "127.50.0.7" in pool and "127.51.0.1" not in pool
    assert pool.owner_of("127.50.0.7") == "ns/a" and pool.held("ns/a") == ["127.50.0.7"]


def test_allocation_skips_reserved() -> None:
    pool = IPPool("127.50.0.0/29")
    pool.reserve("127.50.0.1", "a")
    pool.reserve("127.50.0.2", "b")
    assert pool.allocate("c") == "127.50.0.3"


def test_port_pool_several_per_owner() -> None:
    ports = PortPool(30000, 30002)
    a = ports.allocate("s")
    b = ports.allocate("s", avoid={a})
    assert a != b and ports.held("s") == sorted([a, b])
    assert ports.reserve(30005, "t").outside
    assert ports.reserve(a, "t").owner == "s"
    assert ports.release_owner("s") == 2 and len(ports) == 0


def test_rebuild_from_services_oldest_wins() -> None:
    ips, ports = IPPool("127.201.0.0/24"), PortPool(30000, 30010)

    def svc(name: str, created: str, ip: str, np: int | None, stype: str = "NodePort") -> dict[str, object]:
        port: dict[str, object] = {"port": 80} | ({"nodePort": np} if np else {})
        return {
            "metadata": {"name": name, "namespace": "d", "creationTimestamp": created},
            "spec": {"type": stype, "clusterIP": ip, "ports": [port]},
        }

    reserve_existing(
        [
            svc("late", "2024-01-02T00:00:00Z", "127.201.0.5", 30001),
            svc("early", "2024-01-01T00:00:00Z", "127.201.0.5", 30001),
            svc("head", "2024-01-01T00:00:00Z", "None", None, "ClusterIP"),
            svc("ext", "2024-01-01T00:00:00Z", "127.201.0.9", None, "ExternalName"),
        ],
        ips,
        ports,
    )
    assert ips.owner_of("127.201.0.5") == "d/early" and ports.owner_of(30001) == "d/early"
    assert ips.owner_of("127.201.0.9") is None
    assert ips.allocate("d/new") != "127.201.0.5"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.1.0.0/33", "not an IPv4 CIDR"),
        ("banana", "not an IPv4 CIDR"),
        ("127.1.0.1/16", "host bits set (did you mean 127.1.0.0/16?)"),
        ("10.0.0.0/16", "outside 127.0.0.0/8"),
        ("127.1.0.0/31", "too small"),
    ],
)
def test_parse_cidr_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        parse_cidr(text)


def test_parse_port_range() -> None:
    assert parse_port_range("30000-30999") == (30000, 30999)
    assert parse_port_range("31000") == (31000, 31000)
    for bad in ("x-y", "30999-30000", "0-10", "1-70000"):
        with pytest.raises(ValueError, match="port range"):
            parse_port_range(bad)
