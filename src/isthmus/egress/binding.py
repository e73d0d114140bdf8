"""Pure logic of binding: what a class holds, which address a claim gets, and why one cannot bind.

No I/O: the binder (binder.py) feeds it what its caches hold and writes the outcome.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from isthmus.api.egress import AddressRange, SourceIPClass, canonical_ip, source_ip_name

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Span:
    first: IPAddress
    last: IPAddress

    @property
    def size(self) -> int:
        return int(self.last) - int(self.first) + 1

    def __contains__(self, ip: object) -> bool:
        return (isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)) and ip.version == self.first.version
                and int(self.first) <= int(ip) <= int(self.last))


def range_problems(ranges: Sequence[AddressRange]) -> list[tuple[str, str]]:
    """(field, message) for each bad range: not addresses, mixed families, end before start, overlap."""
    problems: list[tuple[str, str]] = []
    spans: list[tuple[int, Span]] = []
    for i, r in enumerate(ranges):
        try:
            first, last = ipaddress.ip_address(r.start.strip()), ipaddress.ip_address(r.end.strip())
        except ValueError as err:
            problems.append((f"spec.ranges[{i}]", str(err)))
            continue
        if first.version != last.version:
            problems.append((f"spec.ranges[{i}]", f"start {first} and end {last} are not of one address family"))
        elif int(last) < int(first):
            problems.append((f"spec.ranges[{i}].end", f"{last} is before start {first}"))
        else:
            spans.append((i, Span(first, last)))
    for a, (i, s) in enumerate(spans):
        for j, t in spans[a + 1:]:
            if s.first.version == t.first.version and int(s.first) <= int(t.last) and int(t.first) <= int(s.last):
                problems.append((f"spec.ranges[{j}]", f"overlaps spec.ranges[{i}] ({s.first}-{s.last})"))
    if not ranges:
        problems.append(("spec.ranges", "at least one range is required"))
    return problems


def spans(cls: SourceIPClass) -> list[Span]:
    """The valid ranges of a class (bad ones are left out; range_problems says why)."""
    out = []
    for r in cls.spec.ranges:
        try:
            first, last = ipaddress.ip_address(r.start.strip()), ipaddress.ip_address(r.end.strip())
        except ValueError:
            continue
        if first.version == last.version and int(first) <= int(last):
            out.append(Span(first, last))
    return out


def capacity(cls: SourceIPClass) -> int:
    return sum(s.size for s in spans(cls))


def in_class(cls: SourceIPClass, address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in s for s in spans(cls))


def addresses(cls: SourceIPClass) -> Iterator[str]:
    """Every address of the class, in range order (lazily: a /64 is not materialised)."""
    for s in spans(cls):
        ip = s.first
        while True:
            yield str(ip)
            if ip == s.last:
                break
            ip += 1


def sort_key(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(address)
    return ip.version, int(ip)


def namespace_allowed(cls: SourceIPClass, namespace: str) -> bool:
    """Empty allowedNamespaces lets no one claim: fail closed."""
    return namespace in cls.spec.allowed_namespaces


def first_free(cls: SourceIPClass, taken_names: Collection[str]) -> str | None:
    """The first address of the class whose SourceIP does not exist (nor is being created)."""
    for address in addresses(cls):
        if source_ip_name(address) not in taken_names:
            return address
    return None


@dataclass(frozen=True)
class Refusal:
    """Why a claim stays Pending (a Ready=False condition and a Warning Event)."""

    reason: str
    message: str


def check_claim(cls: SourceIPClass | None, class_name: str, namespace: str, wanted: str | None) -> Refusal | None:
    """What stops a claim of `namespace` for class `class_name` before any address is looked at."""
    if cls is None:
        return Refusal("ClassNotFound", f"SourceIPClass {class_name!r} not found")
    if not namespace_allowed(cls, namespace):
        allowed = ", ".join(cls.spec.allowed_namespaces) or "none"
        return Refusal("NamespaceNotAllowed",
                       f"SourceIPClass {class_name!r} does not allow namespace {namespace!r} (allowed: {allowed})")
    problems = range_problems(cls.spec.ranges)
    if problems:
        return Refusal("InvalidRanges", f"SourceIPClass {class_name!r} is invalid: {problems[0][0]}: {problems[0][1]}")
    if wanted is not None:
        try:
            canonical_ip(wanted)
        except ValueError:
            return Refusal("AddressNotInClass", f"spec.sourceIP {wanted!r} is not an IP address")
        if not in_class(cls, wanted):
            return Refusal("AddressNotInClass", f"{wanted} is outside every range of SourceIPClass {class_name!r} "
                           f"({', '.join(f'{r.start}-{r.end}' for r in cls.spec.ranges)})")
    return None
