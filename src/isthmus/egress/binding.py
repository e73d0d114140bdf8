"""Pure logic of binding: what a class holds, which address a claim gets, and why one cannot bind.

No I/O: the binder (binder.py) feeds it what its caches hold and writes the outcome.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Iterator, Sequence
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


def indexed_spans(ranges: Sequence[AddressRange]) -> list[tuple[int, Span]]:
    """(index in spec.ranges, span) of each valid range (bad ones are left out; range_problems says why)."""
    out = []
    for i, r in enumerate(ranges):
        try:
            first, last = ipaddress.ip_address(r.start.strip()), ipaddress.ip_address(r.end.strip())
        except ValueError:
            continue
        if first.version == last.version and int(first) <= int(last):
            out.append((i, Span(first, last)))
    return out


def spans(cls: SourceIPClass) -> list[Span]:
    """The valid ranges of a class."""
    return [s for _, s in indexed_spans(cls.spec.ranges)]


def _overlap(a: Span, b: Span) -> Span | None:
    if a.first.version != b.first.version or int(a.first) > int(b.last) or int(b.first) > int(a.last):
        return None
    return Span(max(a.first, b.first), min(a.last, b.last))


@dataclass(frozen=True)
class Overlap:
    """A range of one class that shares addresses with a range of another class."""

    index: int
    """The range's index in spec.ranges."""
    span: Span
    other: str
    """The other class's name."""
    other_span: Span
    shared: Span


def overlaps(ranges: Sequence[AddressRange], others: Iterable[SourceIPClass], name: str = "") -> list[Overlap]:
    """Where `ranges` share addresses with another class's (a class named `name` is itself, skipped)."""
    theirs = [(o.name, s) for o in others if o.name != name for s in spans(o)]
    out = []
    for i, s in indexed_spans(ranges):
        for other, t in theirs:
            if (shared := _overlap(s, t)) is not None:
                out.append(Overlap(i, s, other, t, shared))
    return out


def _age(cls: SourceIPClass) -> tuple[str, str]:
    created = cls.metadata.creation_timestamp
    return (created.isoformat() if created is not None else "~"), cls.name


def older_classes(cls: SourceIPClass, others: Iterable[SourceIPClass]) -> list[SourceIPClass]:
    """The classes created before `cls` (same second: the name decides), which keep shared addresses."""
    mine = _age(cls)
    return [o for o in others if o.name != cls.name and _age(o) < mine]


def owned_spans(cls: SourceIPClass, older: Iterable[SourceIPClass] = ()) -> list[Span]:
    """The class's addresses, less those an older class also names: an address belongs to one class.

    Admission refuses an overlap; this is what holds when one slipped past it (two classes
    admitted at once, or created before the rule): the first class keeps what it had, so its
    capacity and its SourceIPs do not change under it, and the newer one counts and hands out
    only the rest."""
    taken = [t for o in older for t in spans(o)]
    out: list[Span] = []
    for s in spans(cls):
        pieces = [(int(s.first), int(s.last))]
        for t in taken:
            if t.first.version != s.first.version:
                continue
            lo, hi = int(t.first), int(t.last)
            pieces = [p for a, b in pieces
                      for p in ((a, min(b, lo - 1)), (max(a, hi + 1), b)) if p[0] <= p[1]]
        make = type(s.first)
        out += [Span(make(a), make(b)) for a, b in pieces]
    return out


def capacity(cls: SourceIPClass, older: Iterable[SourceIPClass] = ()) -> int:
    return sum(s.size for s in owned_spans(cls, older))


def in_class(cls: SourceIPClass, address: str, older: Iterable[SourceIPClass] = ()) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in s for s in owned_spans(cls, older))


def addresses(cls: SourceIPClass, older: Iterable[SourceIPClass] = ()) -> Iterator[str]:
    """Every address of the class, in range order (lazily: a /64 is not materialised)."""
    for s in owned_spans(cls, older):
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


def first_free(cls: SourceIPClass, taken_names: Collection[str], older: Iterable[SourceIPClass] = ()) -> str | None:
    """The first address of the class whose SourceIP does not exist (nor is being created)."""
    for address in addresses(cls, older):
        if source_ip_name(address) not in taken_names:
            return address
    return None


@dataclass(frozen=True)
class Refusal:
    """Why a claim stays Pending (a Ready=False condition and a Warning Event)."""

    reason: str
    message: str


def check_claim(cls: SourceIPClass | None, class_name: str, namespace: str, wanted: str | None,
                older: Sequence[SourceIPClass] = ()) -> Refusal | None:
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
        if not in_class(cls, wanted, older):
            holder = next(o.name for o in older if in_class(o, wanted))
            return Refusal("AddressNotInClass", f"{wanted} belongs to SourceIPClass {holder!r}, older than "
                           f"{class_name!r}, whose ranges overlap it")
    return None
