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

__all__ = ["CidrError", "plan_cluster_cidr", "validate_cluster_id"]


class CidrError(ValueError):
    """A clusterset IP CIDR cannot be used; the message says why, naming the values involved."""


def _parse_range(value: str) -> ipaddress.IPv4Network:
    """A clusterset range from the Broker: host bits tolerated (the range only bounds blocks)."""
    try:
        return ipaddress.IPv4Network(value.strip(), strict=False)
    except (ValueError, AttributeError):
        raise CidrError(
            f"clusterset IP CIDR range {value!r} is not a valid IPv4 network (a.b.c.d/n)"
        ) from None


def _parse_requested(value: str) -> ipaddress.IPv4Network:
    try:
        text = value.strip()
        return ipaddress.IPv4Network(text, strict=True)
    except ValueError as exc:
        if "has host bits set" in str(exc):
            fixed = ipaddress.IPv4Network(text, strict=False)
            raise CidrError(
                f"clusterset IP CIDR {value} has host bits set: the network is {fixed}; use that instead"
            ) from None
        raise CidrError(f"clusterset IP CIDR {value!r} is not a valid IPv4 network (a.b.c.d/n)") from None
    except (TypeError, AttributeError):
        raise CidrError(f"clusterset IP CIDR {value!r} is not a valid IPv4 network (a.b.c.d/n)") from None


def _taken_networks(taken: Mapping[str, str], cluster_id: str) -> list[tuple[str, ipaddress.IPv4Network]]:
    """Other clusters' CIDRs, sorted by cluster ID so messages are deterministic.

    The joining cluster's own entry is skipped (a re-join may keep its CIDR); unparseable entries are
    skipped too: they cannot be allocated from, so they cannot overlap anything.
    """
    out: list[tuple[str, ipaddress.IPv4Network]] = []
    for other in sorted(taken):
        if other == cluster_id:
            continue
        try:
            out.append((other, ipaddress.IPv4Network(taken[other].strip(), strict=False)))
        except (ValueError, AttributeError):
            continue
    return out


def plan_cluster_cidr(
    ranges: Sequence[str],
    taken: Mapping[str, str],
    cluster_id: str,
    requested: str | None,
    prefix: int = 16,
) -> str:
    """The VIP CIDR for `cluster_id` (docs/discovery.md, the broker's `Cluster` objects).

    `taken` maps other cluster IDs to their CIDR. With `requested`, it is checked (a strict IPv4
    network, inside one of `ranges`, overlapping nobody else's CIDR) and returned in canonical form;
    otherwise the first free /`prefix` block of `ranges`, in order, is returned. A range smaller
    than /`prefix` is one block. Raises CidrError with a user-facing message.
    """
    nets = [_parse_range(r) for r in ranges]
    others = _taken_networks(taken, cluster_id)
    range_text = ", ".join(str(n) for n in nets) or "(none configured)"

    if requested is not None:
        want = _parse_requested(requested)
        if not any(want.subnet_of(n) for n in nets):
            raise CidrError(
                f"clusterset IP CIDR {want} is not inside the clusterset IP CIDR range {range_text}"
            )
        for other, net in others:
            if want.overlaps(net):
                raise CidrError(
                    f"clusterset IP CIDR {want} overlaps {net}, the clusterset IP CIDR of cluster {other}"
                )
        return str(want)

    if not 0 <= prefix <= 32:
        raise CidrError(f"clusterset IP CIDR prefix length /{prefix} is invalid (must be 0..32)")
    if not nets:
        raise CidrError("no clusterset IP CIDR range is configured on the broker")
    spans = [(int(n.network_address), int(n.broadcast_address)) for _, n in others]
    for net in nets:
        block_prefix = max(prefix, net.prefixlen)
        size = 1 << (32 - block_prefix)
        start, end = int(net.network_address), int(net.broadcast_address)
        while start + size - 1 <= end:
            block_end = start + size - 1
            clash = [hi for lo, hi in spans if lo <= block_end and hi >= start]
            if not clash:
                return f"{ipaddress.IPv4Address(start)}/{block_prefix}"
            # Skip past every overlapping CIDR, staying aligned to the block size.
            nxt = max(clash) + 1
            start = (nxt + size - 1) // size * size
    raise CidrError(
        f"no free /{prefix} block left in the clusterset IP CIDR range {range_text}: "
        f"{len(others)} other cluster(s) hold CIDRs there; pass --clusterset-ip-cidr with a smaller "
        f"free block or widen the range"
    )


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
