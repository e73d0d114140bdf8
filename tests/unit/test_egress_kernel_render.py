"""The kernel gateway's nft script: what `render` writes for representative flows, that it replaces
the tables atomically, that bad flows are refused by name, and (as root, in a throwaway network
namespace) that nft itself accepts every script in check mode."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from isthmus.egress.kernel import TABLE, EgressFlow, IngressFlow, render, source_ips

E1 = EgressFlow("TCP", "10.231.2.100", "10.231.2.2", 8080, ("10.231.1.2", "10.231.1.3"))
E2 = EgressFlow("UDP", "10.231.2.101", "10.231.2.2", 5353, ("10.231.1.4",))
I1 = IngressFlow("TCP", "10.231.2.100", 9000, "10.231.2.2", "10.231.1.2", 9001)
E6 = EgressFlow("TCP", "2001:db8:2::100", "2001:db8:2::2", 443, ("fd00:1::2",))
I6 = IngressFlow("UDP", "2001:db8:2::100", 53, "2001:db8:2::2", "fd00:1::2", 5353)


def table(script: str, family: str) -> str:
    """The text of `table <family> isthmus_egress { ... }` in a script."""
    start = script.index(f"table {family} {TABLE} {{")
    return script[start:script.index("\n}\n", start) + 3]


def chain(script: str, family: str, name: str) -> list[str]:
    body = table(script, family)
    start = body.index(f"\tchain {name} {{")
    return [line.strip() for line in body[start:body.index("\n\t}", start)].splitlines()[1:]]


def test_table_is_replaced_in_one_script() -> None:
    script = render([E1], [I1])
    lines = script.splitlines()
    # add + delete + definition: whatever existed is replaced in the same transaction, and the
    # ip6 table is deleted even without v6 flows (a removed v6 flow leaves nothing behind).
    assert lines[:3] == [f"add table ip {TABLE}", f"delete table ip {TABLE}", f"table ip {TABLE} {{"]
    assert f"add table ip6 {TABLE}\ndelete table ip6 {TABLE}\n" in script
    assert f"table ip6 {TABLE} {{" not in script
    assert render([E1], [I1], table="other").startswith("add table ip other\ndelete table ip other\n")


def test_egress_rules_and_sets() -> None:
    script = render([E1, E2], [])
    ip = table(script, "ip")
    assert "elements = { 10.231.2.2 . tcp . 8080, 10.231.2.2 . udp . 5353 }" in ip  # egress_targets
    assert ("elements = { 10.231.1.2 . 10.231.2.2 . tcp . 8080, 10.231.1.3 . 10.231.2.2 . tcp . 8080, "
            "10.231.1.4 . 10.231.2.2 . udp . 5353 }") in ip  # egress_allowed
    assert ("10.231.1.2 . 10.231.2.2 . tcp . 8080 : 10.231.2.100, 10.231.1.3 . 10.231.2.2 . tcp . 8080 : "
            "10.231.2.100, 10.231.1.4 . 10.231.2.2 . udp . 5353 : 10.231.2.101") in ip  # egress_snat
    assert "counter refused {" in ip
    assert chain(script, "ip", "forward") == [
        "type filter hook forward priority filter; policy accept;",
        "ct state established,related accept",
        "ip daddr . meta l4proto . th dport @egress_targets "
        "ip saddr . ip daddr . meta l4proto . th dport != @egress_allowed counter name refused drop",
    ]
    assert chain(script, "ip", "postrouting") == [
        "type nat hook postrouting priority srcnat; policy accept;",
        "snat to ip saddr . ip daddr . meta l4proto . th dport map @egress_snat",
    ]
    # No ingress flow: nothing new may reach a source IP (replies of SNAT'd connections are established).
    assert chain(script, "ip", "guard")[1:] == [
        "ct state established,related accept",
        "ip daddr @source_ips counter name refused_ingress drop",
    ]
    assert chain(script, "ip", "prerouting") == ["type nat hook prerouting priority dstnat; policy accept;"]


def test_ruleset_does_not_grow_with_flows() -> None:
    many = [EgressFlow("TCP", f"10.231.3.{n}", "10.231.2.2", 1000 + n, (f"10.231.1.{n}",)) for n in range(1, 200)]
    assert chain(render(many, []), "ip", "forward") == chain(render([E1], []), "ip", "forward")


def test_ingress_rules() -> None:
    script = render([], [I1])
    ip = table(script, "ip")
    assert "elements = { 10.231.2.2 . 10.231.2.100 . tcp . 9000 : 10.231.1.2 . 9001 }" in ip
    assert chain(script, "ip", "prerouting")[1:] == [
        "dnat to ip saddr . ip daddr . meta l4proto . th dport map @ingress_dnat"]
    assert chain(script, "ip", "guard")[1:] == [
        "ct state established,related accept",
        "ip daddr @source_ips ip saddr . ip daddr . meta l4proto . th dport != @ingress_allowed "
        "counter name refused_ingress drop",
    ]
    assert chain(script, "ip", "guard")[0] == "type filter hook prerouting priority dstnat - 10; policy accept;"
    assert chain(script, "ip", "forward")[1:] == [
        "ct state established,related accept",
        "ct status dnat ip daddr . meta l4proto . th dport @ingress_dests "
        "ip saddr . ip daddr . meta l4proto . th dport != @ingress_dest_allowed counter name refused_ingress drop",
    ]


def test_v6_flows_get_their_own_table() -> None:
    script = render([E1, E6], [I6])
    ip, ip6 = table(script, "ip"), table(script, "ip6")
    assert "2001:db8" not in ip and "10.231" not in ip6
    assert "type ipv6_addr . ipv6_addr . inet_proto . inet_service : ipv6_addr" in ip6
    assert "fd00:1::2 . 2001:db8:2::2 . tcp . 443 : 2001:db8:2::100" in ip6
    assert "2001:db8:2::2 . 2001:db8:2::100 . udp . 53 : fd00:1::2 . 5353" in ip6
    assert "snat to ip6 saddr . ip6 daddr . meta l4proto . th dport map @egress_snat" in ip6
    assert "meta l4proto != ipv6-icmp" in ip6  # neighbour discovery still reaches the source IPs
    assert script.index(f"delete table ip6 {TABLE}") < script.index(f"table ip6 {TABLE} {{")


def test_empty_input_gives_only_base_chains() -> None:
    script = render([], [])
    ip = table(script, "ip")
    for name, hook in (("guard", "prerouting"), ("forward", "forward"), ("postrouting", "postrouting"),
                       ("prerouting", "prerouting")):
        lines = chain(script, "ip", name)
        assert len(lines) == 1 and f"hook {hook}" in lines[0]
    assert "set " not in ip and "map " not in ip
    assert f"table ip6 {TABLE} {{" not in script


def test_client_less_flow_still_guards_its_destination() -> None:
    script = render([EgressFlow("TCP", "10.231.2.100", "10.231.2.2", 8080, ())], [])
    ip = table(script, "ip")
    assert "elements = { 10.231.2.2 . tcp . 8080 }" in ip
    assert "@egress_targets" in "".join(chain(script, "ip", "forward"))
    assert "elements" not in ip.split("map egress_snat", 1)[1].split("}", 1)[0]  # no SNAT entry for anybody


def test_normalised_deduplicated_and_first_source_wins() -> None:
    a = EgressFlow("TCP", "10.231.2.100", "10.231.2.2", 8080, ("10.231.1.2",))
    b = EgressFlow("TCP", "10.231.2.105", "10.231.2.2", 8080, ("10.231.1.2",))
    v6 = EgressFlow("TCP", "2001:DB8:2:0::100", "2001:db8:2::2", 443, ("fd00:1:0::2",))
    script = render([a, a, b, v6], [I1, I1])
    assert "10.231.1.2 . 10.231.2.2 . tcp . 8080 : 10.231.2.100 }" in script
    assert "2001:db8:2::100" in script and "DB8" not in script
    assert script.count("10.231.2.2 . 10.231.2.100 . tcp . 9000 : 10.231.1.2 . 9001") == 1
    assert source_ips([a, b, v6], [I1]) == {"10.231.2.100", "10.231.2.105", "2001:db8:2::100"}


def test_counters_carried_over() -> None:
    script = render([E1], [], counters={"ip/refused": (7, 420)})
    assert "counter refused {\n\t\tpackets 7 bytes 420\n\t}" in script
    assert "counter refused_ingress {\n\t\tpackets 0 bytes 0\n\t}" in script


@pytest.mark.parametrize(("flow", "message"), [
    (EgressFlow("SCTP", "10.231.2.100", "10.231.2.2", 80, ()), "protocol must be TCP or UDP"),
    (EgressFlow("TCP", "10.231.2.300", "10.231.2.2", 80, ()), "source_ip is not an IP address"),
    (EgressFlow("TCP", "10.231.2.100", "example.com", 80, ()), "target_ip is not an IP address"),
    (EgressFlow("TCP", "10.231.2.100", "10.231.2.2", 0, ()), "port must be a port 1-65535"),
    (EgressFlow("TCP", "10.231.2.100", "10.231.2.2", 65536, ()), "port must be a port 1-65535"),
    (EgressFlow("TCP", "10.231.2.100", "10.231.2.2", 80, ("10.231.1.0/24",)), "client is not an IP address"),
    (EgressFlow("TCP", "10.231.2.100", "2001:db8::2", 80, ()), "mixes IPv4 and IPv6"),
    (EgressFlow("TCP", "10.231.2.100", "10.231.2.2", 80, ("fd00::1",)), "mixes IPv4 and IPv6"),
    (IngressFlow("UDP", "10.231.2.100", 53, "10.231.2.2", "10.231.1.2", 70000), "dest_port must be a port"),
    (IngressFlow("udp ", "10.231.2.100", 53, "10.231.2.2", "10.231.1.2", 53), "protocol must be TCP or UDP"),
    (IngressFlow("TCP", "10.231.2.100", 53, "2001:db8::2", "10.231.1.2", 53), "mixes IPv4 and IPv6"),
    (IngressFlow("TCP", "10.231.2.100", 53, "10.231.2.2", "pod", 53), "dest_ip is not an IP address"),
])
def test_bad_flow_is_named(flow: EgressFlow | IngressFlow, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        if isinstance(flow, EgressFlow):
            render([E1, flow], [])
        else:
            render([], [I1, flow])
    assert str(flow) in str(err.value)


# --- nft itself parses what render writes ----------------------------------------------------------------

needs_nft = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None,
                               reason="nft -c needs CAP_NET_ADMIN (root) and nft/ip installed")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"ir-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=10)


@needs_nft
@pytest.mark.parametrize("flows", [
    pytest.param(([], []), id="empty"),
    pytest.param(([E1, E2], []), id="egress"),
    pytest.param(([], [I1]), id="ingress"),
    pytest.param(([E1, E2, E6, EgressFlow("UDP", "10.231.2.9", "10.231.2.3", 7, ())], [I1, I6]), id="both-v4-v6"),
])
def test_nft_accepts_the_script(netns: str, flows: tuple[list[EgressFlow], list[IngressFlow]]) -> None:
    script = render(*flows, counters={"ip/refused": (3, 180)})
    for _ in range(2):  # applied twice: the second run replaces what the first created
        done = subprocess.run(["ip", "netns", "exec", netns, "nft", "-c", "-f", "-"], input=script, text=True,
                              capture_output=True, timeout=10)
        assert done.returncode == 0, done.stderr
        done = subprocess.run(["ip", "netns", "exec", netns, "nft", "-f", "-"], input=script, text=True,
                              capture_output=True, timeout=10)
        assert done.returncode == 0, done.stderr
