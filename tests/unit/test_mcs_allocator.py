"""VIP allocator, cluster CIDR planning and cluster ID validation (isthmus.discovery.allocator)."""

from __future__ import annotations

import ipaddress

import pytest

from isthmus.clusterset.cidrs import CidrError, plan_cluster_cidr, plan_cluster_cidrs, validate_cluster_id
from isthmus.discovery.allocator import IPV6_WINDOW, AllocatorFull, VipAllocator

# --- VipAllocator ------------------------------------------------------------------------------


def test_full_slash16_in_order_then_full() -> None:
    alloc = VipAllocator("243.0.0.0/16")
    assert alloc.size == 65534
    assert alloc.cidr == "243.0.0.0/16"
    got = [alloc.allocate() for _ in range(alloc.size)]
    assert got[0] == "243.0.0.1"
    assert got[-1] == "243.0.255.254"
    expected = [str(ipaddress.IPv4Address(int(ipaddress.IPv4Address("243.0.0.1")) + i)) for i in range(65534)]
    assert got == expected
    assert alloc.used == 65534
    with pytest.raises(AllocatorFull, match=r"243\.0\.0\.0/16"):
        alloc.allocate()


def test_network_and_broadcast_excluded() -> None:
    alloc = VipAllocator("10.0.0.0/30")
    assert alloc.size == 2
    assert not alloc.contains("10.0.0.0")
    assert not alloc.contains("10.0.0.3")
    assert alloc.contains("10.0.0.1") and alloc.contains("10.0.0.2")
    assert [alloc.allocate(), alloc.allocate()] == ["10.0.0.1", "10.0.0.2"]
    with pytest.raises(AllocatorFull):
        alloc.allocate()


def test_slash31_has_two_usable_addresses() -> None:
    alloc = VipAllocator("10.0.0.4/31")
    assert alloc.size == 2
    assert [alloc.allocate(), alloc.allocate()] == ["10.0.0.4", "10.0.0.5"]
    with pytest.raises(AllocatorFull):
        alloc.allocate()


def test_slash32_has_one_address() -> None:
    alloc = VipAllocator("10.0.0.7/32")
    assert alloc.size == 1
    assert alloc.contains("10.0.0.7")
    assert alloc.allocate() == "10.0.0.7"
    with pytest.raises(AllocatorFull):
        alloc.allocate()
    alloc.release("10.0.0.7")
    assert alloc.allocate() == "10.0.0.7"


def test_freed_address_is_not_handed_out_again_at_once() -> None:
    """Export/unexport churn: other clusters may still import a freed VIP, so it is reused last."""
    alloc = VipAllocator("243.1.0.0/24")
    for _ in range(20):
        alloc.allocate()
    alloc.release("243.1.0.5")
    alloc.release("243.1.0.3")
    assert alloc.used == 18
    assert alloc.allocate() == "243.1.0.21"
    alloc.release("243.1.0.21")
    assert alloc.allocate() == "243.1.0.22"


def test_allocation_wraps_around_to_the_oldest_freed_addresses() -> None:
    alloc = VipAllocator("10.0.0.0/29")  # 6 usable
    got = [alloc.allocate() for _ in range(5)]
    assert got == [f"10.0.0.{i}" for i in range(1, 6)]
    alloc.release("10.0.0.4")
    alloc.release("10.0.0.2")
    assert alloc.allocate() == "10.0.0.6"  # the end first
    assert alloc.allocate() == "10.0.0.2"  # then from the start again
    assert alloc.allocate() == "10.0.0.4"
    with pytest.raises(AllocatorFull):
        alloc.allocate()
    alloc.release("10.0.0.1")
    alloc.release("10.0.0.5")
    assert alloc.allocate() == "10.0.0.5"  # after the last one handed out (10.0.0.4), not the lowest
    assert alloc.allocate() == "10.0.0.1"


def test_wrap_search_crosses_byte_boundaries() -> None:
    alloc = VipAllocator("10.0.0.0/27")  # 30 usable: 4 bytes
    ips = [alloc.allocate() for _ in range(30)]
    alloc.release(ips[9])  # second byte
    alloc.release(ips[25])  # fourth byte
    assert alloc.allocate() == ips[9]  # wrapped: the search restarts at index 0
    assert alloc.allocate() == ips[25]
    alloc.release(ips[3])
    alloc.release(ips[26])
    assert alloc.allocate() == ips[26]  # after ips[25], in the same byte
    assert alloc.allocate() == ips[3]


def test_rebuild_resumes_after_the_highest_reserved_address() -> None:
    """An agent restart rebuilds the allocator with reserve(): the low freed addresses stay unused."""
    alloc = VipAllocator("243.1.0.0/24")
    for ip in ("243.1.0.7", "243.1.0.2", "243.1.0.9"):  # in any order, as a cache lists them
        assert alloc.reserve(ip)
    assert alloc.allocate() == "243.1.0.10"
    assert not alloc.reserve("243.1.0.2")  # already used: no effect
    assert alloc.allocate() == "243.1.0.11"


def test_release_idempotent_and_ignores_foreign() -> None:
    alloc = VipAllocator("243.1.0.0/24")
    ip = alloc.allocate()
    alloc.release(ip)
    alloc.release(ip)
    alloc.release("10.0.0.1")
    alloc.release("not-an-ip")
    alloc.release("243.1.0.0")  # network address: not ours
    assert alloc.used == 0
    assert not alloc.in_use(ip)


def test_reserve() -> None:
    alloc = VipAllocator("243.1.0.0/24")
    assert alloc.reserve("243.1.0.1")
    assert not alloc.reserve("243.1.0.1")  # already used
    assert not alloc.reserve("243.2.0.1")  # outside
    assert not alloc.reserve("243.1.0.255")  # broadcast
    assert not alloc.reserve("garbage")
    assert alloc.in_use("243.1.0.1")
    assert alloc.used == 1
    assert alloc.reserve("243.1.0.3")
    assert alloc.allocate() == "243.1.0.4"
    assert alloc.used == 3


def test_reserve_everything_then_full() -> None:
    alloc = VipAllocator("243.1.0.0/29")
    for i in range(1, 7):
        assert alloc.reserve(f"243.1.0.{i}")
    with pytest.raises(AllocatorFull):
        alloc.allocate()
    alloc.release("243.1.0.6")
    assert alloc.allocate() == "243.1.0.6"


def test_allocation_crossing_byte_boundaries_with_odd_size() -> None:
    alloc = VipAllocator("10.0.0.0/28")  # 14 usable: 2 bytes, tail bits padded
    got = [alloc.allocate() for _ in range(14)]
    assert got == [f"10.0.0.{i}" for i in range(1, 15)]
    with pytest.raises(AllocatorFull):
        alloc.allocate()


def test_in_use_and_contains_outside() -> None:
    alloc = VipAllocator("243.1.0.0/24")
    assert not alloc.contains("243.1.1.1")
    assert not alloc.in_use("243.1.1.1")
    assert not alloc.contains("")
    assert "243.1.0.0/24" in repr(alloc)


@pytest.mark.parametrize(
    ("cidr", "fragment"),
    [
        ("243.0.0.1/16", "did you mean 243.0.0.0/16"),
        ("243.0.0.0/33", "bad prefix length"),
        ("nope", "not an IPv4 or IPv6 network"),
        ("fd00::1/64", "did you mean fd00::/64"),
        ("fd00::/129", "bad prefix length"),
    ],
)
def test_bad_cidr(cidr: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        VipAllocator(cidr)


def test_ipv6_block_allocates_from_its_window() -> None:
    alloc = VipAllocator("fd00:243:0:1::/64")
    assert alloc.family == "IPv6" and alloc.size == IPV6_WINDOW - 1
    assert [alloc.allocate() for _ in range(2)] == ["fd00:243:0:1::1", "fd00:243:0:1::2"]
    assert not alloc.contains("fd00:243:0:1::") and not alloc.contains("243.0.0.1")
    assert alloc.contains("fd00:243:0:1::ffff") and not alloc.contains("fd00:243:0:1::1:0")
    assert alloc.reserve("fd00:243:0:1::10") and alloc.allocate() == "fd00:243:0:1::11"
    assert not alloc.reserve("243.0.0.5")
    alloc.release("fd00:243:0:1::1")
    assert not alloc.in_use("fd00:243:0:1::1")


def test_small_ipv6_block() -> None:
    alloc = VipAllocator("fd00::/126")
    assert [alloc.allocate() for _ in range(3)] == ["fd00::1", "fd00::2", "fd00::3"]
    with pytest.raises(AllocatorFull):
        alloc.allocate()


# --- plan_cluster_cidr -------------------------------------------------------------------------

RANGE = ["243.0.0.0/8"]


def test_plan_first_block() -> None:
    assert plan_cluster_cidr(RANGE, {}, "c1", None) == "243.0.0.0/16"


def test_plan_skips_taken_blocks() -> None:
    taken = {"a": "243.0.0.0/16", "b": "243.1.0.0/16", "c": "243.3.0.0/16"}
    assert plan_cluster_cidr(RANGE, taken, "d", None) == "243.2.0.0/16"


def test_plan_skips_partially_overlapping_taken() -> None:
    taken = {"a": "243.0.128.0/17", "b": "243.1.0.0/24"}
    assert plan_cluster_cidr(RANGE, taken, "c", None) == "243.2.0.0/16"


def test_plan_skips_large_taken_block_in_one_step() -> None:
    taken = {"a": "243.0.0.0/9"}
    assert plan_cluster_cidr(RANGE, taken, "c", None) == "243.128.0.0/16"


def test_plan_ignores_own_entry() -> None:
    assert plan_cluster_cidr(RANGE, {"me": "243.0.0.0/16"}, "me", None) == "243.0.0.0/16"


def test_plan_multiple_ranges_in_order() -> None:
    ranges = ["243.0.0.0/16", "244.0.0.0/15"]
    taken = {"a": "243.0.0.0/16"}
    assert plan_cluster_cidr(ranges, taken, "b", None) == "244.0.0.0/16"
    taken["b"] = "244.0.0.0/16"
    assert plan_cluster_cidr(ranges, taken, "c", None) == "244.1.0.0/16"


def test_plan_range_smaller_than_prefix_is_one_block() -> None:
    assert plan_cluster_cidr(["10.9.8.0/24"], {}, "a", None) == "10.9.8.0/24"
    with pytest.raises(CidrError, match="no free /16 block"):
        plan_cluster_cidr(["10.9.8.0/24"], {"a": "10.9.8.128/25"}, "b", None)


def test_plan_custom_prefix() -> None:
    taken = {"a": "243.0.0.0/24"}
    assert plan_cluster_cidr(RANGE, taken, "b", None, prefix=24) == "243.0.1.0/24"


def test_plan_exhausted() -> None:
    taken = {"a": "243.0.0.0/17", "b": "243.0.128.0/17"}
    with pytest.raises(CidrError, match=r"no free /16 block left .*243\.0\.0\.0/16"):
        plan_cluster_cidr(["243.0.0.0/16"], taken, "c", None)


def test_plan_no_ranges() -> None:
    with pytest.raises(CidrError, match="no clusterset IP CIDR range"):
        plan_cluster_cidr([], {}, "a", None)


def test_plan_bad_range_and_prefix() -> None:
    with pytest.raises(CidrError, match="'bogus' is not a valid IP network"):
        plan_cluster_cidr(["bogus"], {}, "a", None)
    with pytest.raises(CidrError, match="/33"):
        plan_cluster_cidr(RANGE, {}, "a", None, prefix=33)


def test_plan_ignores_unparseable_taken() -> None:
    assert plan_cluster_cidr(RANGE, {"x": "garbage"}, "a", None) == "243.0.0.0/16"


def test_requested_accepted_canonical() -> None:
    assert plan_cluster_cidr(RANGE, {"a": "243.0.0.0/16"}, "b", " 243.5.0.0/16 ") == "243.5.0.0/16"


def test_requested_whole_range() -> None:
    assert plan_cluster_cidr(RANGE, {}, "a", "243.0.0.0/8") == "243.0.0.0/8"


def test_requested_host_bits() -> None:
    with pytest.raises(CidrError) as err:
        plan_cluster_cidr(RANGE, {}, "a", "243.5.1.0/16")
    assert "243.5.1.0/16 has host bits set" in str(err.value)
    assert "243.5.0.0/16" in str(err.value)


def test_requested_invalid() -> None:
    with pytest.raises(CidrError, match=r"'243\.5\.0\.0/40' is not a valid IP network"):
        plan_cluster_cidr(RANGE, {}, "a", "243.5.0.0/40")
    with pytest.raises(CidrError) as err:
        plan_cluster_cidr(RANGE, {}, "a", "fd00::/64")
    assert str(err.value) == (
        "clusterset IP CIDR fd00::/64 is IPv6, but the clusterset IP CIDR range 243.0.0.0/8 has no IPv6 range "
        "(deploy-broker --clusterset-ip-cidr-range adds one)"
    )


def test_requested_outside_range() -> None:
    with pytest.raises(CidrError) as err:
        plan_cluster_cidr(["243.0.0.0/8", "244.0.0.0/16"], {}, "a", "10.0.0.0/16")
    assert str(err.value) == (
        "clusterset IP CIDR 10.0.0.0/16 is not inside the clusterset IP CIDR range 243.0.0.0/8, 244.0.0.0/16"
    )


def test_requested_straddling_range_edge_is_outside() -> None:
    with pytest.raises(CidrError, match="not inside"):
        plan_cluster_cidr(["243.0.0.0/16"], {}, "a", "243.0.0.0/15")


def test_requested_inside_second_range() -> None:
    assert plan_cluster_cidr(["243.0.0.0/16", "244.0.0.0/8"], {}, "a", "244.7.0.0/16") == "244.7.0.0/16"


def test_requested_overlap_names_cluster() -> None:
    taken = {"east": "243.1.0.0/16", "west": "243.2.0.0/16"}
    with pytest.raises(CidrError) as err:
        plan_cluster_cidr(RANGE, taken, "north", "243.2.128.0/17")
    assert str(err.value) == (
        "clusterset IP CIDR 243.2.128.0/17 overlaps 243.2.0.0/16, the clusterset IP CIDR of cluster west"
    )


def test_requested_containing_another_is_overlap() -> None:
    with pytest.raises(CidrError, match="cluster east"):
        plan_cluster_cidr(RANGE, {"east": "243.1.2.0/24"}, "n", "243.0.0.0/14")


def test_requested_same_as_own_previous() -> None:
    assert plan_cluster_cidr(RANGE, {"me": "243.9.0.0/16"}, "me", "243.9.0.0/16") == "243.9.0.0/16"


def test_cidr_error_is_value_error() -> None:
    assert issubclass(CidrError, ValueError)


# --- validate_cluster_id -----------------------------------------------------------------------


@pytest.mark.parametrize("good", ["a", "c1", "east-1", "0", "a" * 63, "1-2-3"])
def test_valid_cluster_ids(good: str) -> None:
    assert validate_cluster_id(good) is None


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("", "must not be empty"),
        ("a" * 64, "64 characters"),
        ("East", "'E'"),
        ("a_b", "'_'"),
        ("a.b", "'.'"),
        ("-a", "start and end"),
        ("a-", "start and end"),
        ("ab\n", "'\\n'"),
    ],
)
def test_invalid_cluster_ids(bad: str, fragment: str) -> None:
    message = validate_cluster_id(bad)
    assert message is not None
    assert fragment in message


# --- plan_cluster_cidrs (dual-stack) -------------------------------------------------------------

DUAL = ["243.0.0.0/8", "fd00:243::/48"]


def test_plan_dual_stack_one_block_per_family() -> None:
    assert plan_cluster_cidrs(DUAL, {}, "a", []) == ["243.0.0.0/16", "fd00:243::/64"]
    taken = {"a": ["243.0.0.0/16", "fd00:243::/64"], "b": ["243.1.0.0/16"]}
    assert plan_cluster_cidrs(DUAL, taken, "c", []) == ["243.2.0.0/16", "fd00:243:0:1::/64"]
    # The ranges' order decides the CIDRs' order: IPv6 first when the broker lists it first.
    assert plan_cluster_cidrs(list(reversed(DUAL)), {}, "a", []) == ["fd00:243::/64", "243.0.0.0/16"]


def test_plan_dual_stack_requests_and_current() -> None:
    taken = {"a": ["243.0.0.0/16", "fd00:243::/64"]}
    assert plan_cluster_cidrs(DUAL, taken, "b", ["fd00:243:0:7::/64"]) == ["243.1.0.0/16", "fd00:243:0:7::/64"]
    # A re-join keeps its blocks and gains the family the broker added since.
    assert plan_cluster_cidrs(DUAL, taken, "b", [], current=["243.9.0.0/16"]) == ["243.9.0.0/16", "fd00:243:0:1::/64"]
    with pytest.raises(CidrError) as err:
        plan_cluster_cidrs(DUAL, taken, "b", ["fd00:243::/64"])
    assert str(err.value) == "clusterset IP CIDR fd00:243::/64 overlaps fd00:243::/64, the clusterset IP CIDR of cluster a"


def test_plan_dual_stack_rejections() -> None:
    with pytest.raises(CidrError) as err:
        plan_cluster_cidrs(DUAL, {}, "a", ["fd00:243:0:1::/64", "fd00:243:0:2::/64"])
    assert str(err.value) == (
        "--clusterset-ip-cidr fd00:243:0:1::/64 and fd00:243:0:2::/64 are both IPv6: a cluster has at most one "
        "clusterset IP CIDR per IP family (one IPv4 and one IPv6)"
    )
    with pytest.raises(CidrError, match="has no IPv6 range"):
        plan_cluster_cidrs(["243.0.0.0/8"], {}, "a", ["fd00::/64"])
    with pytest.raises(CidrError, match="fd00:243::1/64 has host bits set: the network is fd00:243::/64"):
        plan_cluster_cidrs(DUAL, {}, "a", ["fd00:243::1/64"])
    with pytest.raises(CidrError, match=r"no free /64 block left .*fd00:243::/64"):
        plan_cluster_cidrs(["243.0.0.0/8", "fd00:243::/64"], {"a": ["fd00:243::/64"]}, "b", [])
