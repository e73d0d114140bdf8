"""Per-cluster VIP CIDR planning and cluster IDs: what `isthmus join` checks before a cluster joins.

Pure logic, no API calls. Every cluster of a clusterset gets its own block of the broker's
clusterset IP CIDR range (docs/discovery.md, the broker's `Cluster` objects); discovery's agent then
allocates VIPs inside its block (`isthmus.discovery.allocator`). Every error message here may be
shown verbatim to a user (the CLI exits 2 with it), so they name the offending values.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence

__all__ = ["CidrError", "plan_cluster_cidr", "plan_cluster_cidrs", "same_family", "split_cidrs", "validate_cluster_id"]


class CidrError(ValueError):
    """A clusterset IP CIDR cannot be used; the message says why, naming the values involved."""


Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_FAMILY = {4: "IPv4", 6: "IPv6"}
_SHAPE = "a.b.c.d/n or an IPv6 network such as fd00:243::/48"


def _parse_range(value: str) -> Network:
    """A clusterset range from the Broker: host bits tolerated (the range only bounds blocks)."""
    try:
        return ipaddress.ip_network(value.strip(), strict=False)
    except (ValueError, AttributeError):
        raise CidrError(f"clusterset IP CIDR range {value!r} is not a valid IP network ({_SHAPE})") from None


def _parse_requested(value: str) -> Network:
    try:
        text = value.strip()
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        if "has host bits set" in str(exc):
            fixed = ipaddress.ip_network(text, strict=False)
            raise CidrError(
                f"clusterset IP CIDR {value} has host bits set: the network is {fixed}; use that instead"
            ) from None
        raise CidrError(f"clusterset IP CIDR {value!r} is not a valid IP network ({_SHAPE})") from None
    except (TypeError, AttributeError):
        raise CidrError(f"clusterset IP CIDR {value!r} is not a valid IP network ({_SHAPE})") from None


def _taken_networks(
    taken: Mapping[str, str | Sequence[str]], cluster_id: str, version: int
) -> list[tuple[str, Network]]:
    """Other clusters' CIDRs of one family, sorted by cluster ID so messages are deterministic.

    The joining cluster's own entries are skipped (a re-join may keep its CIDRs); unparseable entries
    are skipped too: they cannot be allocated from, so they cannot overlap anything.
    """
    out: list[tuple[str, Network]] = []
    for other in sorted(taken):
        if other == cluster_id:
            continue
        held = taken[other]
        for text in [held] if isinstance(held, str) else held:
            try:
                net = ipaddress.ip_network(text.strip(), strict=False)
            except (ValueError, AttributeError):
                continue
            if net.version == version:
                out.append((other, net))
    return out


def plan_cluster_cidr(
    ranges: Sequence[str],
    taken: Mapping[str, str | Sequence[str]],
    cluster_id: str,
    requested: str | None,
    prefix: int = 16,
    family: str | None = None,
) -> str:
    """The VIP CIDR of one family for `cluster_id` (docs/discovery.md, the broker's `Cluster` objects).

    `taken` maps other cluster IDs to their CIDR(s); only the family's ranges and CIDRs count (the
    requested CIDR's family, else `family`, else the first range's). With `requested`, it is checked (a
    strict network, inside one of the family's `ranges`, overlapping nobody else's CIDR) and returned
    in canonical form; otherwise the first free /`prefix` block of the family's ranges, in order, is
    returned. A range smaller than /`prefix` is one block. Raises CidrError with a user-facing message.
    """
    all_nets = [_parse_range(r) for r in ranges]
    want = _parse_requested(requested) if requested is not None else None
    if want is not None:
        version = want.version
    elif family is not None:
        version = 6 if family == "IPv6" else 4
    else:
        version = all_nets[0].version if all_nets else 4
    nets = [n for n in all_nets if n.version == version]
    others = _taken_networks(taken, cluster_id, version)
    range_text = ", ".join(str(n) for n in all_nets) or "(none configured)"

    if want is not None:
        if not nets and all_nets:
            raise CidrError(
                f"clusterset IP CIDR {want} is {_FAMILY[version]}, but the clusterset IP CIDR range "
                f"{range_text} has no {_FAMILY[version]} range (deploy-broker --clusterset-ip-cidr-range "
                f"adds one)"
            )
        if not any(want.subnet_of(n) for n in nets):  # type: ignore[arg-type]  # same version checked
            raise CidrError(
                f"clusterset IP CIDR {want} is not inside the clusterset IP CIDR range {range_text}"
            )
        for other, net in others:
            if want.overlaps(net):
                raise CidrError(
                    f"clusterset IP CIDR {want} overlaps {net}, the clusterset IP CIDR of cluster {other}"
                )
        return str(want)

    bits = 128 if version == 6 else 32
    if not 0 <= prefix <= bits:
        raise CidrError(f"clusterset IP CIDR prefix length /{prefix} is invalid (must be 0..{bits})")
    if not nets:
        kind = f"{_FAMILY[version]} " if all_nets else ""
        raise CidrError(f"no {kind}clusterset IP CIDR range is configured on the broker")
    spans = [(int(n.network_address), int(n.broadcast_address)) for _, n in others]
    for net in nets:
        block_prefix = max(prefix, net.prefixlen)
        size = 1 << (bits - block_prefix)
        start, end = int(net.network_address), int(net.broadcast_address)
        while start + size - 1 <= end:
            block_end = start + size - 1
            clash = [hi for lo, hi in spans if lo <= block_end and hi >= start]
            if not clash:
                first = ipaddress.IPv6Address(start) if version == 6 else ipaddress.IPv4Address(start)
                return f"{first}/{block_prefix}"
            # Skip past every overlapping CIDR, staying aligned to the block size.
            nxt = max(clash) + 1
            start = (nxt + size - 1) // size * size
    raise CidrError(
        f"no free /{prefix} block left in the clusterset IP CIDR range {range_text}: "
        f"{len(others)} other cluster(s) hold CIDRs there; pass --clusterset-ip-cidr with a smaller "
        f"free block or widen the range"
    )


def plan_cluster_cidrs(
    ranges: Sequence[str],
    taken: Mapping[str, Sequence[str]],
    cluster_id: str,
    requested: Sequence[str],
    current: Sequence[str] = (),
    prefixes: Mapping[str, int] | None = None,
) -> list[str]:
    """The VIP CIDRs of `cluster_id`: one per family the broker has a range for, in the ranges' order.

    Per family: the requested CIDR (checked as `plan_cluster_cidr` does), else the cluster's `current`
    one (a re-join keeps its block, even if the range has changed), else the first free block of
    `prefixes[family]` (IPv4 /16, IPv6 /64 unless given). At most one request per family; a request of a
    family the broker has no range for is an error, not ignored: the user asked for VIPs of it.
    """
    sizes = {"IPv4": 16, "IPv6": 64, **(prefixes or {})}
    by_family: dict[str, str] = {}
    for text in requested:
        net = _parse_requested(text)
        fam = _FAMILY[net.version]
        if fam in by_family:
            raise CidrError(
                f"--clusterset-ip-cidr {by_family[fam]} and {text.strip()} are both {fam}: a cluster has at "
                f"most one clusterset IP CIDR per IP family (one IPv4 and one IPv6)"
            )
        by_family[fam] = text
    kept: dict[str, str] = {}
    for text in current:
        try:
            kept.setdefault(_FAMILY[ipaddress.ip_network(text.strip(), strict=False).version], text)
        except (ValueError, AttributeError):
            continue
    families = list(dict.fromkeys(_FAMILY[_parse_range(r).version] for r in ranges))
    if not families:
        raise CidrError("no clusterset IP CIDR range is configured on the broker")
    out: list[str] = []
    for fam in families:
        if fam in by_family:
            out.append(plan_cluster_cidr(ranges, taken, cluster_id, by_family[fam]))
        elif fam in kept:
            out.append(kept[fam])
        else:
            out.append(plan_cluster_cidr(ranges, taken, cluster_id, None, sizes[fam], family=fam))
    for fam, text in by_family.items():
        if fam not in families:
            plan_cluster_cidr(ranges, taken, cluster_id, text)  # raises: no range of that family
    return out


def split_cidrs(value: str | Sequence[str] | None) -> list[str]:
    """CIDRs from a flag: repeated and/or comma-separated, blanks dropped."""
    items = [value] if isinstance(value, str) else list(value or [])
    return [c.strip() for raw in items for c in raw.split(",") if c.strip()]


def same_family(a: str, b: str) -> bool:
    """Whether two CIDRs are of one IP family (False when either does not parse)."""
    try:
        return ipaddress.ip_network(a.strip(), strict=False).version == ipaddress.ip_network(
            b.strip(), strict=False
        ).version
    except (ValueError, AttributeError):
        return False


_LABEL_CHARS = re.compile(r"[a-z0-9-]+")


def validate_cluster_id(cluster_id: str) -> str | None:
    """Why `cluster_id` is not a valid cluster ID (a DNS-1123 label), or None if it is.

    Cluster IDs appear in object names, labels and DNS names, hence the label rules.
    """
    if not cluster_id:
        return "cluster ID must not be empty"
    if len(cluster_id) > 63:
        return f"cluster ID {cluster_id!r} is {len(cluster_id)} characters long; at most 63 are allowed"
    if not _LABEL_CHARS.fullmatch(cluster_id):
        bad = sorted({c for c in cluster_id if not _LABEL_CHARS.fullmatch(c)})
        return (
            f"cluster ID {cluster_id!r} contains {', '.join(repr(c) for c in bad)}: only lower-case "
            f"letters, digits and '-' are allowed (a DNS-1123 label)"
        )
    if cluster_id[0] == "-" or cluster_id[-1] == "-":
        return f"cluster ID {cluster_id!r} must start and end with a lower-case letter or digit"
    return None
