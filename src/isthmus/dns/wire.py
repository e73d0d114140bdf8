"""The wire cache: every answer precomputed as response bytes, so a query is a header parse, a
dict lookup and a copy with the query's ID, flags and question (original case) spliced in.

Layout of a response: ID | flags | QD=1 AN NS AR | question as asked | body | [OPT].
Every answer record's owner is the question name, written as the pointer 0xC00C, so a body is
valid behind any spelling of the question. Authority SOAs and SRV targets are written
uncompressed, so bodies never depend on where they land.

Misses (NODATA, NXDOMAIN, REFUSED, errors) are built on the fly from per-zone SOA bytes; they
never allocate cache entries, so random names cannot grow memory.
"""

from __future__ import annotations

import ipaddress
import itertools
import struct
import time
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from isthmus.dns.metrics import DnsStats
from isthmus.dns.records import (
    AAAA,
    ANY,
    CNAME,
    PTR,
    SRV,
    TXT,
    A,
    Addr,
    Cname,
    Ptr,
    Rdata,
    RecordSet,
    Srv,
    Txt,
)

__all__ = [
    "DEFAULT_MAX_UDP",
    "NS",
    "SOA",
    "WireCache",
    "name_to_wire",
]

NS = 2
SOA = 6
OPT = 41
IXFR = 251
AXFR = 252
CLASS_IN = 1
CLASS_ANY = 255

NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
BADVERS = 16

DEFAULT_MAX_UDP = 1232
"""Largest UDP response we send and the size we advertise (the 2020 DNS flag day value: no fragments)."""

_QUERY_COUNTS = b"\x00\x01\x00\x00\x00\x00"  # QD=1 AN=0 NS=0
_PACK_RR = struct.Struct(">HHIH").pack
_PACK_COUNTS = struct.Struct(">HHHH").pack

# An answer ready to splice: (flags + counts without OPT, the same with OPT, body, stat key, counts).
# The first two hold one header per combination of the query's RD and CD bits (index: RD | CD >> 3),
# so a hit copies a header instead of building one.
Entry = tuple[tuple[bytes, ...], tuple[bytes, ...], bytes, tuple[int, int], bytes]


def name_to_wire(name: str) -> bytes:
    """Lowercase uncompressed wire form of a (relative-to-root) name; "" is the root."""
    out = bytearray()
    for label in name.rstrip(".").lower().split(".") if name.strip(".") else ():
        raw = label.encode("idna") if not label.isascii() else label.encode()
        if not 0 < len(raw) <= 63:
            raise ValueError(f"bad label {label!r} in {name!r}")
        out.append(len(raw))
        out += raw
    out.append(0)
    if len(out) > 255:
        raise ValueError(f"name too long: {name!r}")
    return bytes(out)


def _rdata(rtype: int, r: Rdata) -> bytes:
    if isinstance(r, Addr):
        return ipaddress.ip_address(r.ip).packed
    if isinstance(r, Srv):
        return struct.pack(">HHH", r.priority, r.weight, r.port) + name_to_wire(r.target)
    if isinstance(r, Txt):
        raw = r.text.encode()
        return b"".join(
            bytes([len(c)]) + c for c in (raw[i : i + 255] for i in range(0, max(len(raw), 1), 255))
        )
    if isinstance(r, (Ptr, Cname)):
        return name_to_wire(r.target)
    raise TypeError(f"unsupported record {r!r}")  # pragma: no cover


def _answer_rr(rtype: int, ttl: int, rdata: bytes) -> bytes:
    return b"\xc0\x0c" + _PACK_RR(rtype, CLASS_IN, ttl, len(rdata)) + rdata


def _entry(qtype: int, rrs: Sequence[bytes], ns: int = 0, authority: bytes = b"") -> Entry:
    an = len(rrs)
    flags = [bytes((0x84 | (x & 1), (x & 2) << 3 | NOERROR)) for x in range(4)]
    return (
        tuple(f + _PACK_COUNTS(1, an, ns, 0) for f in flags),
        tuple(f + _PACK_COUNTS(1, an, ns, 1) for f in flags),
        b"".join(rrs) + authority,
        (qtype, NOERROR),
        _PACK_COUNTS(1, an, ns, 0),
    )


@dataclass(frozen=True)
class Zone:
    """A zone we are authoritative for: its apex name and the SOA to put in negative answers."""

    name: str
    wire: bytes
    soa_rdata: bytes
    soa_authority: bytes
    """The SOA as an authority record (owner written out: it is not the question name)."""


def make_zone(name: str, ttl: int, serial: int) -> Zone:
    wire = name_to_wire(name)
    apex = name.rstrip(".").lower()
    rdata = (
        name_to_wire(f"ns.dns.{apex}" if apex else "ns.dns")
        + name_to_wire(f"hostmaster.{apex}" if apex else "hostmaster")
        + struct.pack(">IIIII", serial & 0xFFFFFFFF, 7200, 1800, 86400, ttl)
    )
    return Zone(apex, wire, rdata, wire + _PACK_RR(SOA, CLASS_IN, ttl, len(rdata)) + rdata)


class WireCache:
    """Precomputed responses for every (name, type) of the served zones, plus the query parser.

    `replace(owner, records)` swaps everything one owner (a service) contributes; shared names
    (empty non-terminals like `<ns>.svc.<zone>`) are reference-counted. Until `set_ready()`, every
    name in a zone answers SERVFAIL so no client caches a false NXDOMAIN during the initial sync.
    """

    def __init__(
        self,
        zones: Sequence[str],
        *,
        ttl: int = 5,
        max_udp: int = DEFAULT_MAX_UDP,
        stats: DnsStats | None = None,
        versions: dict[str, str] | None = None,
    ) -> None:
        self.ttl = ttl
        self.max_udp = max(512, max_udp)
        self.stats = stats if stats is not None else DnsStats()
        self.serial = int(time.time())
        self.zones = [make_zone(z, ttl, self.serial) for z in zones]
        self._zone_by_wire = {z.wire: z for z in self.zones}
        self.ready = False
        self._entries: dict[bytes, Iterator[Entry]] = {}
        self._names: dict[bytes, Zone] = {}
        self._name_refs: dict[bytes, int] = {}
        self._key_owner: dict[bytes, Hashable] = {}
        self._owned: dict[Hashable, tuple[frozenset[bytes], frozenset[bytes]]] = {}
        self._opt = {
            False: b"\x00\x00\x29" + struct.pack(">H", self.max_udp) + b"\x00\x00\x00\x00\x00\x00",
            True: b"\x00\x00\x29" + struct.pack(">H", self.max_udp) + b"\x00\x00\x80\x00\x00\x00",
        }
        self._versions = versions or {}

    # ---- building ----------------------------------------------------------------------------------

    def set_ready(self) -> None:
        """Install the apex records (SOA, NS, dns-version TXT) and start answering."""
        for z in self.zones:
            rs = RecordSet()
            rs.names.add(z.name)
            version = self._versions.get(z.name)
            if version is not None:
                rs.add(f"dns-version.{z.name}", TXT, [Txt(version)])
                rs.names.add(f"dns-version.{z.name}")
            extra = {
                z.wire + struct.pack(">HH", SOA, CLASS_IN): _entry(
                    SOA, [_answer_rr(SOA, self.ttl, z.soa_rdata)]
                ),
                z.wire + struct.pack(">HH", NS, CLASS_IN): _entry(
                    NS, [_answer_rr(NS, self.ttl, name_to_wire(f"ns.dns.{z.name}"))]
                ),
            }
            self.replace(("zone", z.name), rs, extra)
        self.ready = True
        self.stats.ready = True

    def zone_of(self, lname: bytes) -> Zone | None:
        """The served zone containing a lowercase wire name (label-aligned suffix match)."""
        n = len(lname)
        for z in self.zones:
            zl = len(z.wire)
            if n >= zl and lname.endswith(z.wire):
                i = 0  # walk labels to check the suffix starts on a label boundary
                while i < n - zl:
                    i += lname[i] + 1
                if i == n - zl:
                    return z
        return None

    def _zone_for_owner(self, lname: bytes, name: str) -> Zone:
        z = self.zone_of(lname)
        if z is None:  # a PTR for a VIP: treat the single name as its own apex
            z = make_zone(name, self.ttl, self.serial)
        return z

    def replace(self, owner: Hashable, rs: RecordSet | None, extra: dict[bytes, Entry] | None = None) -> None:
        """Make `rs` the records of `owner` (None: remove them). New answers are installed before old
        ones are dropped, so a name present in both never disappears, even briefly."""
        entries: dict[bytes, Iterator[Entry]] = {}
        names: dict[bytes, Zone] = {}
        if rs is not None:
            by_name: dict[str, list[tuple[int, tuple[Rdata, ...]]]] = {}
            for (name, qtype), ring in rs.rrsets.items():
                lw = name_to_wire(name)
                variants = [
                    _entry(qtype, [_answer_rr(qtype, self.ttl, _rdata(qtype, r)) for r in recs])
                    for recs in ring
                ]
                entries[lw + struct.pack(">HH", qtype, CLASS_IN)] = _iterate(variants)
                by_name.setdefault(name, []).append((qtype, ring[0]))
            for name, rrsets in by_name.items():  # ANY: everything at the name (first variant of rings)
                rrs = [_answer_rr(qt, self.ttl, _rdata(qt, r)) for qt, recs in sorted(rrsets) for r in recs]
                entries[name_to_wire(name) + struct.pack(">HH", ANY, CLASS_IN)] = _iterate([_entry(ANY, rrs)])
            for name, target in rs.cnames.items():
                lw = name_to_wire(name)
                # 5-byte suffix: never equal to a real key (wire name + 4 bytes of type and class)
                entries[lw + b"CNAME"] = _iterate(
                    [_entry(CNAME, [_answer_rr(CNAME, self.ttl, name_to_wire(target))])]
                )
            for name in rs.names | {n for n, _ in rs.rrsets} | set(rs.cnames):
                lw = name_to_wire(name)
                names[lw] = self._zone_for_owner(lw, name)
        for k, e in (extra or {}).items():
            entries[k] = _iterate([e])
        # install new
        for k, it in entries.items():
            self._entries[k] = it
            self._key_owner[k] = owner
        for lw, z in names.items():
            self._names[lw] = z
            self._name_refs[lw] = self._name_refs.get(lw, 0) + 1
        # drop old
        old_keys, old_names = self._owned.pop(owner, (frozenset(), frozenset()))
        for k in old_keys:
            if k not in entries and self._key_owner.get(k) == owner:
                del self._entries[k]
                del self._key_owner[k]
        for lw in old_names:
            refs = self._name_refs[lw] - 1
            if refs:
                self._name_refs[lw] = refs
            else:
                del self._name_refs[lw]
                del self._names[lw]
        if entries or names:
            self._owned[owner] = (frozenset(entries), frozenset(names))
        self.stats.records = len(self._entries)

    def owners(self) -> list[Hashable]:
        return list(self._owned)

    # ---- answering ---------------------------------------------------------------------------------

    def answer(self, data: bytes, tcp: bool = False) -> bytes | None:
        """The response to one query message, or None to drop it. Never raises.

        One function, not a guard around a parser: a Python call per query is measurable here."""
        try:
            n = len(data)
            if n < 12:
                self.stats.dropped += 1
                return None
            f0 = data[2]
            if f0 & 0xF8 or data[4:10] != _QUERY_COUNTS:  # QR set, opcode != QUERY, or odd counts
                return self._odd_header(data)
            # The question as sent is the key when its name is lowercase (almost always): the name ends
            # at the first zero byte. A zero inside a label cannot make a false hit, since every key is
            # a whole valid name whose terminator would then sit where this query has a length byte.
            qend = data.find(0, 12) + 1
            q4 = qend + 4
            question = data[12:q4]
            it = self._entries.get(question) if qend else None
            if it is not None or (qend and q4 <= n and data[12:qend] in self._names):
                key = question  # a known name (so a valid one), as cached: no need to walk it
            else:
                # walk labels (no compression allowed in a query's question)
                i = 12
                ln = data[12]
                while ln:
                    if ln > 63:
                        return _formerr(data, self.stats)
                    i += ln + 1
                    ln = data[i]
                qend = i + 1
                q4 = qend + 4
                if q4 > n or qend > 267:
                    return _formerr(data, self.stats)
                question = data[12:q4]
                key = data[12:qend].lower() + data[qend:q4]
                if key != question:
                    it = self._entries.get(key)
            # EDNS0
            edns = False
            do = False
            limit = 65535 if tcp else 512
            if data[10] or data[11]:
                if data[10] or data[11] > 1:
                    return _formerr(data, self.stats)
                if n >= q4 + 11 and data[q4] == 0 and data[q4 + 1] == 0 and data[q4 + 2] == OPT:
                    if q4 + 11 + ((data[q4 + 9] << 8) | data[q4 + 10]) > n:
                        return _formerr(data, self.stats)
                    edns = True
                    do = bool(data[q4 + 7] & 0x80)
                    if data[q4 + 6]:  # EDNS version > 0
                        return self._badvers(data, q4, do)
                    if not tcp:
                        limit = min(max(512, (data[q4 + 3] << 8) | data[q4 + 4]), self.max_udp)
                elif n < q4 + 11:
                    return _formerr(data, self.stats)
                # else: some other additional record (e.g. TSIG we cannot verify): answer without EDNS
            it = self._entries.get(key)
            if it is None:
                return self._miss(data, key, qend, q4, edns, do, limit)
            headers, headers_edns, body, stat, _ = next(it)
            stats = self.stats
            stats.hits += 1
            stats.queries[stat] += 1
            if edns:
                if q4 + len(body) + 11 > limit:
                    return data[:2] + bytes((0x86 | (f0 & 1), (data[3] & 0x10))) + _TC_EDNS + question + self._opt[do]
                return data[:2] + headers_edns[(f0 & 1) | (data[3] & 0x10) >> 3] + question + body + self._opt[do]
            if q4 + len(body) > limit:
                return data[:2] + bytes((0x86 | (f0 & 1), (data[3] & 0x10))) + _TC_PLAIN + question
            return data[:2] + headers[(f0 & 1) | (data[3] & 0x10) >> 3] + question + body
        except IndexError:  # ran off the end while parsing
            return _formerr(data, self.stats)
        except Exception:  # pragma: no cover - a bug must cost one answer, not the server
            self.stats.dropped += 1
            return None

    def _miss(self, data: bytes, key: bytes, qend: int, q4: int, edns: bool, do: bool, limit: int) -> bytes:
        stats = self.stats
        stats.misses += 1
        lname = key[:-4]
        qtype = (key[-4] << 8) | key[-3]
        qclass = (key[-2] << 8) | key[-1]
        question = data[12:q4]
        if qclass == CLASS_IN and self.ready and qtype not in (OPT, AXFR, IXFR):
            # The common misses, NODATA and NXDOMAIN, from precomputed headers.
            zone = self._names.get(lname)
            if zone is not None:
                rcode = NOERROR if lname + b"CNAME" not in self._entries else -1
            else:
                zone = self.zone_of(lname)
                rcode = NXDOMAIN
            if zone is not None and rcode >= 0:
                x = (data[2] & 1) | (data[3] & 0x10) >> 3
                if edns:
                    out = data[:2] + _NEGATIVE_EDNS[rcode][x] + question + zone.soa_authority + self._opt[do]
                else:
                    out = data[:2] + _NEGATIVE[rcode][x] + question + zone.soa_authority
                if len(out) <= limit:
                    stats.queries[(qtype, rcode)] += 1
                    return out
        opt = self._opt[do] if edns else b""

        def reply(rcode: int, an: int = 0, ns: int = 0, body: bytes = b"") -> bytes:
            return _reply(data, question, stats, qtype, rcode, an, ns, body, opt, limit)

        if qtype == OPT:
            return reply(FORMERR)
        if qclass == CLASS_ANY:  # class ANY: answer what class IN has
            it = self._entries.get(lname + key[-4:-2] + b"\x00\x01")
            if it is not None:
                _, _, body, _, counts = next(it)
                return reply(NOERROR, (counts[2] << 8) | counts[3], (counts[4] << 8) | counts[5], body)
        elif qclass != CLASS_IN:
            return reply(REFUSED)
        zone = self._names.get(lname)
        if zone is None:
            zone = self.zone_of(lname)
            if zone is None:
                return reply(REFUSED)  # not ours: never recurse
            if not self.ready:
                return reply(SERVFAIL)
            if qtype in (AXFR, IXFR):
                return reply(REFUSED)
            return reply(NXDOMAIN, 0, 1, zone.soa_authority)
        if not self.ready:
            return reply(SERVFAIL)
        if qtype in (AXFR, IXFR):
            return reply(REFUSED)
        cname = self._entries.get(lname + b"CNAME")
        if cname is not None:
            _, _, body, _, _ = next(cname)
            return reply(NOERROR, 1, 0, body)
        return reply(NOERROR, 0, 1, zone.soa_authority)  # NODATA

    def _odd_header(self, data: bytes) -> bytes | None:
        f0 = data[2]
        if f0 & 0x80:  # a response: never answer one (reflection loops)
            self.stats.dropped += 1
            return None
        opcode = (f0 >> 3) & 0x0F
        if opcode != 0:
            self.stats.queries[(0, NOTIMP)] += 1
            self.stats.misses += 1
            return data[:2] + bytes((0x80 | (f0 & 0x79), NOTIMP)) + b"\x00" * 8
        return _formerr(data, self.stats)

    def _badvers(self, data: bytes, q4: int, do: bool) -> bytes:
        self.stats.misses += 1
        self.stats.queries[(((data[q4 - 4] << 8) | data[q4 - 3]), BADVERS)] += 1
        opt = (
            b"\x00\x00\x29"
            + struct.pack(">H", self.max_udp)
            + b"\x01\x00"
            + (b"\x80" if do else b"\x00")
            + b"\x00\x00\x00"
        )
        return (
            data[:2]
            + bytes((0x84 | (data[2] & 1), data[3] & 0x10))
            + _PACK_COUNTS(1, 0, 0, 1)
            + data[12:q4]
            + opt
        )

    # ---- introspection (tests, debugging) ----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def has_name(self, name: str) -> bool:
        return name_to_wire(name) in self._names


_NEGATIVE = {
    rcode: tuple(bytes((0x84 | (x & 1), (x & 2) << 3 | rcode)) + _PACK_COUNTS(1, 0, 1, 0) for x in range(4))
    for rcode in (NOERROR, NXDOMAIN)
}
"""Header after the ID of a NODATA (NOERROR) or NXDOMAIN answer with the SOA, by RD | CD >> 3."""
_NEGATIVE_EDNS = {
    rcode: tuple(bytes((0x84 | (x & 1), (x & 2) << 3 | rcode)) + _PACK_COUNTS(1, 0, 1, 1) for x in range(4))
    for rcode in (NOERROR, NXDOMAIN)
}
_TC_PLAIN = _PACK_COUNTS(1, 0, 0, 0)
_TC_EDNS = _PACK_COUNTS(1, 0, 0, 1)


def _reply(
    data: bytes, question: bytes, stats: DnsStats, qtype: int, rcode: int, an: int, ns: int, body: bytes,
    opt: bytes, limit: int,
) -> bytes:
    """A response built for a miss (not from the cache)."""
    stats.queries[(qtype, rcode)] += 1
    flags = bytes((0x84 | (data[2] & 0x01), (data[3] & 0x10) | rcode))
    out = data[:2] + flags + _PACK_COUNTS(1, an, ns, 1 if opt else 0) + question + body + opt
    if len(out) > limit:  # only a huge SOA-less body could do this; keep the header valid
        flags = bytes((0x86 | (data[2] & 0x01), (data[3] & 0x10) | rcode))
        out = data[:2] + flags + _PACK_COUNTS(1, 0, 0, 1 if opt else 0) + question + opt
    return out


def _iterate(variants: list[Entry]) -> Iterator[Entry]:
    """One answer forever, or a ring served in turn (round-robin across clusters)."""
    return itertools.repeat(variants[0]) if len(variants) == 1 else itertools.cycle(variants)


def _formerr(data: bytes, stats: DnsStats) -> bytes | None:
    if len(data) < 12:
        stats.dropped += 1
        return None
    stats.misses += 1
    stats.queries[(0, FORMERR)] += 1
    return data[:2] + bytes((0x80 | (data[2] & 0x79), FORMERR)) + b"\x00" * 8


def encode_records(records: Iterable[tuple[int, Rdata]], ttl: int) -> bytes:
    """Answer records for the question name (used by tests to compare bodies)."""
    return b"".join(_answer_rr(t, ttl, _rdata(t, r)) for t, r in records)


_ = (A, AAAA, PTR, SRV)  # re-exported record types are part of the module's vocabulary
