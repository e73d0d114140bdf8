"""ClusterSet IP (VIP) allocation inside this cluster's VIP CIDR.

Pure logic, no API calls: the agent keeps one `VipAllocator` over its cluster's CIDR (aggregates.py,
which decides when to allocate; rebuilt on start from the ExportedServices that hold VIPs,
docs/discovery.md "VIP lifecycle"). Which CIDR a cluster gets is membership's business
(`isthmus.clusterset.cidrs`, used by `isthmus join`).
"""

from __future__ import annotations

import ipaddress
import re

__all__ = [
    "IPV6_WINDOW",
    "AllocatorFull",
    "VipAllocator",
]

IPV6_WINDOW = 1 << 16
"""How many addresses at the start of an IPv6 block VIPs come from. A /64 has 2**64 addresses, far
more than a bitmap can hold; 65535 VIPs (the window minus the subnet-router anycast address) are as
many as an IPv4 /16 gives, more than a cluster exports services."""

_NOT_FULL_BYTE = re.compile(rb"[^\xff]")
"""Finds a bitmap byte with a free bit at C speed (the allocator's hot path)."""


class AllocatorFull(Exception):
    """Every address of the allocator's CIDR is in use."""


def _parse_ip(ip: str, version: int) -> int | None:
    """The address as an int, or None if it is not an address of `version` (callers treat that as
    'outside')."""
    try:
        addr = ipaddress.ip_address(ip.strip())
    except (ValueError, AttributeError):
        return None
    return int(addr) if addr.version == version else None


class VipAllocator:
    """Bitmap allocator over the usable host addresses of one IPv4 or IPv6 CIDR.

    IPv4: network and broadcast addresses are excluded for prefixes shorter than /31 (RFC 3021 makes
    both addresses of a /31 usable; a /32 is its one address). IPv6 has no broadcast: only the
    subnet-router anycast address (the block's first, RFC 4291) is excluded, and VIPs come from the
    block's first `IPV6_WINDOW` addresses.

    `allocate` hands out the first free address after the last one handed out, wrapping around at
    the end of the CIDR, so a freed address is reused as late as possible: other clusters may still
    hold an import with it for a while, and their proxies would otherwise serve it for two services.
    `reserve` (the agent's start-up rebuild from the VIPs the ExportedServices hold) moves that position to
    the highest address it marks, so a restarted agent resumes after the newest VIPs instead of
    handing out the just-freed low addresses again.
    """

    def __init__(self, cidr: str) -> None:
        try:
            net = ipaddress.ip_network(cidr.strip(), strict=True)
        except ipaddress.NetmaskValueError as exc:
            raise ValueError(f"invalid clusterset IP CIDR {cidr!r}: bad prefix length ({exc})") from None
        except ValueError as exc:
            if "has host bits set" in str(exc):
                fixed = ipaddress.ip_network(cidr.strip(), strict=False)
                raise ValueError(
                    f"invalid clusterset IP CIDR {cidr!r}: host bits are set (did you mean {fixed}?)"
                ) from None
            if "/" in cidr and _parse_ip(cidr.split("/", 1)[0], 4) is not None:
                raise ValueError(f"invalid clusterset IP CIDR {cidr!r}: bad prefix length") from None
            if "/" in cidr and _parse_ip(cidr.split("/", 1)[0], 6) is not None:
                raise ValueError(f"invalid clusterset IP CIDR {cidr!r}: bad prefix length") from None
            raise ValueError(
                f"invalid clusterset IP CIDR {cidr!r}: not an IPv4 or IPv6 network (a.b.c.d/n or x:y::/n)"
            ) from None
        except AttributeError:
            raise ValueError(f"invalid clusterset IP CIDR {cidr!r}: not a string") from None
        self._net = net
        self._version = net.version
        first, last = int(net.network_address), int(net.broadcast_address)
        if net.version == 4 and net.prefixlen < 31:
            first, last = first + 1, last - 1
        elif net.version == 6 and net.prefixlen < 127:
            first, last = first + 1, min(last, first + IPV6_WINDOW - 1)
        self._first = first
        self._size = last - first + 1
        self._bits = bytearray((self._size + 7) // 8)
        # Bits past the end are marked used so a search never returns them.
        tail = len(self._bits) * 8 - self._size
        if tail:
            self._bits[-1] = (1 << tail) - 1  # the low bits are the last positions
        self._used = 0
        self._last = -1
        """Index of the address last allocated (or the highest reserved); the search starts after it."""

    # --- introspection ---------------------------------------------------------------------

    @property
    def cidr(self) -> str:
        """The canonical CIDR this allocator covers."""
        return str(self._net)

    @property
    def family(self) -> str:
        """IPv4 or IPv6: the family of the VIPs handed out."""
        return "IPv6" if self._version == 6 else "IPv4"

    @property
    def size(self) -> int:
        """How many addresses can be allocated in total."""
        return self._size

    @property
    def used(self) -> int:
        """How many addresses are allocated or reserved."""
        return self._used

    def _index(self, ip: str) -> int | None:
        value = _parse_ip(ip, self._version)
        if value is None:
            return None
        idx = value - self._first
        return idx if 0 <= idx < self._size else None

    def _test(self, idx: int) -> bool:
        return bool(self._bits[idx >> 3] & (0x80 >> (idx & 7)))

    def contains(self, ip: str) -> bool:
        """Whether `ip` is an allocatable address of this CIDR (network/broadcast are not)."""
        return self._index(ip) is not None

    def in_use(self, ip: str) -> bool:
        """Whether `ip` is allocated or reserved here (False for addresses outside the CIDR)."""
        idx = self._index(ip)
        return idx is not None and self._test(idx)

    # --- mutation --------------------------------------------------------------------------

    def _find_free(self, start: int) -> int | None:
        """The first free index at or after `start`, or None."""
        if start >= self._size:
            return None
        byte_idx = start >> 3
        # Positions before `start` in its byte count as used (bit 0x80 is the byte's first position).
        byte = self._bits[byte_idx] | ((0xFF00 >> (start & 7)) & 0xFF)
        if byte == 0xFF:
            match = _NOT_FULL_BYTE.search(self._bits, byte_idx + 1)
            if match is None:
                return None
            byte_idx = match.start()
            byte = self._bits[byte_idx]
        bit = 0
        while byte & (0x80 >> bit):
            bit += 1
        return byte_idx * 8 + bit  # padding bits past the end are set, so this is < size

    def allocate(self) -> str:
        """The first free address after the last allocated one (wrapping), now marked used.

        Raises AllocatorFull when none is left.
        """
        if self._used >= self._size:
            raise AllocatorFull(f"all {self._size} clusterset IPs of {self._net} are in use")
        idx = self._find_free(self._last + 1)
        if idx is None:
            idx = self._find_free(0)
        assert idx is not None  # used < size: some bit is free
        self._bits[idx >> 3] |= 0x80 >> (idx & 7)
        self._used += 1
        self._last = idx
        if self._version == 6:
            return str(ipaddress.IPv6Address(self._first + idx))
        return str(ipaddress.IPv4Address(self._first + idx))

    def reserve(self, ip: str) -> bool:
        """Mark `ip` used (e.g. a VIP found on a ServiceImport at start-up).

        Allocation resumes after the highest address reserved this way (see the class docstring).
        False if it was already used, lies outside the CIDR or is of the other family.
        """
        idx = self._index(ip)
        if idx is None or self._test(idx):
            return False
        self._bits[idx >> 3] |= 0x80 >> (idx & 7)
        self._used += 1
        self._last = max(self._last, idx)
        return True

    def release(self, ip: str) -> None:
        """Free `ip`; a no-op if it is free already or not ours (releases may repeat after retries)."""
        idx = self._index(ip)
        if idx is None or not self._test(idx):
            return
        self._bits[idx >> 3] &= ~(0x80 >> (idx & 7)) & 0xFF
        self._used -= 1

    def __repr__(self) -> str:
        return f"VipAllocator({self.cidr!r}, used={self._used}/{self._size})"
