"""Address and port allocation: ClusterIPs, NodePorts and Pod IPs.

Pure bookkeeping, no API calls. Each pool maps a value to its owner (an object key such as
``"ns/name"``), so a controller can ask "what does this object already hold?" and re-use it
after a failed write instead of leaking a second value. kube-lite keeps no state of its own:
at start the pools are rebuilt from the objects (:meth:`Pool.reserve` of every value found)
before anything new is allocated. Allocation is round-robin from the last value handed out,
so a freshly released address is not re-used at once (stale DNS answers and proxies would
otherwise send traffic to the wrong Service or Pod).

Error messages may be shown to users verbatim (CLI, Events), so they name the values.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "LOOPBACK",
    "IPPool",
    "PoolFull",
    "PortPool",
    "Reservation",
    "parse_cidr",
    "parse_port_range",
]

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
"""kube-lite binds Pod IPs and the proxy binds ClusterIPs: only loopback addresses are local."""


class PoolFull(Exception):
    """Every value of the pool is in use."""


def parse_cidr(text: str, what: str = "CIDR") -> ipaddress.IPv4Network:
    """An IPv4 network inside 127.0.0.0/8 with room for addresses; ValueError says what is wrong."""
    try:
        net = ipaddress.IPv4Network(text.strip(), strict=True)
    except ValueError as e:
        if "host bits set" in str(e):
            fixed = ipaddress.IPv4Network(text.strip(), strict=False)
            raise ValueError(f"{what} {text!r} has host bits set (did you mean {fixed}?)") from None
        raise ValueError(f"{what} {text!r} is not an IPv4 CIDR such as 127.101.0.0/16") from None
    if not net.subnet_of(LOOPBACK):
        raise ValueError(f"{what} {text!r} is outside 127.0.0.0/8: kube-lite only uses loopback addresses")
    if net.prefixlen > 30:
        raise ValueError(f"{what} {text!r} is too small: use a prefix of /30 or shorter")
    return net


def parse_port_range(text: str) -> tuple[int, int]:
    """``"30000-32767"`` → (30000, 32767); ValueError with a clear message otherwise."""
    lo_s, sep, hi_s = text.strip().partition("-")
    try:
        lo, hi = int(lo_s), int(hi_s if sep else lo_s)
    except ValueError:
        raise ValueError(f"port range {text!r} is not of the form LOW-HIGH, e.g. 30000-32767") from None
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"port range {text!r} must satisfy 1 <= LOW <= HIGH <= 65535")
    return lo, hi


@dataclass(frozen=True, slots=True)
class Reservation:
    """Outcome of :meth:`Pool.reserve`: ``ok``, or why not (``outside`` / held by ``owner``)."""

    ok: bool
    outside: bool = False
    owner: str | None = None


class _IntPool:
    """Owners of the integers in [lo, hi], with a round-robin cursor."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self._owner: dict[int, str] = {}
        self._by_owner: dict[str, set[int]] = {}
        self._next = lo

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def __len__(self) -> int:
        return len(self._owner)

    def _reserve(self, value: int, owner: str) -> Reservation:
        if not self.lo <= value <= self.hi:
            return Reservation(False, outside=True)
        held = self._owner.get(value)
        if held is not None and held != owner:
            return Reservation(False, owner=held)
        self._owner[value] = owner
        self._by_owner.setdefault(owner, set()).add(value)
        return Reservation(True)

    def _allocate(self, owner: str) -> int:
        if len(self._owner) >= self.size:
            raise PoolFull()
        v = self._next
        for _ in range(self.size):
            if v not in self._owner:
                break
            v = self.lo if v >= self.hi else v + 1
        self._owner[v] = owner
        self._by_owner.setdefault(owner, set()).add(v)
        self._next = self.lo if v >= self.hi else v + 1
        return v

    def _release(self, value: int, owner: str | None = None) -> bool:
        held = self._owner.get(value)
        if held is None or (owner is not None and held != owner):
            return False
        del self._owner[value]
        values = self._by_owner[held]
        values.discard(value)
        if not values:
            del self._by_owner[held]
        return True

    def _held(self, owner: str) -> list[int]:
        return sorted(self._by_owner.get(owner, ()))

    def release_owner(self, owner: str) -> int:
        """Release everything ``owner`` holds; returns how many values were freed."""
        values = self._by_owner.pop(owner, set())
        for v in values:
            del self._owner[v]
        return len(values)

    def owners(self) -> Iterator[str]:
        return iter(list(self._by_owner))


class IPPool(_IntPool):
    """The usable host addresses of an IPv4 CIDR (network and broadcast address excluded)."""

    def __init__(self, cidr: str | ipaddress.IPv4Network) -> None:
        self.network = cidr if isinstance(cidr, ipaddress.IPv4Network) else parse_cidr(cidr)
        first, last = int(self.network.network_address), int(self.network.broadcast_address)
        if self.network.prefixlen < 31:
            first, last = first + 1, last - 1
        super().__init__(first, last)

    def __contains__(self, ip: object) -> bool:
        v = _ip(ip) if isinstance(ip, str) else None
        return v is not None and self.lo <= v <= self.hi

    def reserve(self, ip: str, owner: str) -> Reservation:
        """Record ``ip`` as ``owner``'s (idempotent); refused if outside the CIDR or someone else's."""
        v = _ip(ip)
        return Reservation(False, outside=True) if v is None else self._reserve(v, owner)

    def allocate(self, owner: str) -> str:
        """A free address for ``owner`` (PoolFull if none). Re-uses one ``owner`` already holds."""
        held = self._by_owner.get(owner)
        if held:
            return str(ipaddress.IPv4Address(min(held)))
        return str(ipaddress.IPv4Address(self._allocate(owner)))

    def release(self, ip: str, owner: str | None = None) -> bool:
        """Free ``ip`` (only if ``owner`` holds it, when given); False if it was not held."""
        v = _ip(ip)
        return v is not None and self._release(v, owner)

    def owner_of(self, ip: str) -> str | None:
        v = _ip(ip)
        return self._owner.get(v) if v is not None else None

    def held(self, owner: str) -> list[str]:
        return [str(ipaddress.IPv4Address(v)) for v in self._held(owner)]


class PortPool(_IntPool):
    """Port numbers of a NodePort range; one owner (a Service) may hold several."""

    def reserve(self, port: int, owner: str) -> Reservation:
        return self._reserve(port, owner)

    def allocate(self, owner: str, avoid: set[int] | frozenset[int] = frozenset()) -> int:
        """A port for ``owner``: one it already holds and is not in ``avoid`` (ports it uses), else a free one."""
        for v in self._held(owner):
            if v not in avoid:
                return v
        return self._allocate(owner)

    def release(self, port: int, owner: str | None = None) -> bool:
        return self._release(port, owner)

    def owner_of(self, port: int) -> str | None:
        return self._owner.get(port)

    def held(self, owner: str) -> list[int]:
        return self._held(owner)


def _ip(text: str) -> int | None:
    try:
        return int(ipaddress.IPv4Address(text.strip()))
    except (ValueError, AttributeError):
        return None
