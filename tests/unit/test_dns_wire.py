"""The wire cache: responses checked by dnspython, an independent parser."""

from __future__ import annotations

import struct

import dns.edns
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isthmus.dns.records import A, Addr, Endpoint, ImportSnap, Port, RecordSet, SliceSnap, clusterset_records
from isthmus.dns.wire import WireCache, name_to_wire

BASE = "web.ns.svc.clusterset.local"


def make_cache(**kw: object) -> WireCache:
    c = WireCache(["clusterset.local"], ttl=7, versions={"clusterset.local": "1.0.0"}, **kw)  # type: ignore[arg-type]
    imp = ImportSnap("ns", "web", "ClusterSetIP", ("243.0.0.7",), (Port("http", "TCP", 80),), ())
    c.replace("web", clusterset_records(imp, [], local_cluster="c1", local=None, zone="clusterset.local"))
    c.set_ready()
    return c


def ask(
    c: WireCache, name: str, rdtype: str = "A", *, tcp: bool = False, **kw: object
) -> dns.message.Message:
    q = dns.message.make_query(name, rdtype, **kw)  # type: ignore[arg-type]
    wire = q.to_wire()
    resp = c.answer(wire, tcp)
    assert resp is not None
    r = dns.message.from_wire(resp)
    assert q.is_response(r)
    return r


def test_answer_a_with_case_preserved_and_flags() -> None:
    c = make_cache()
    r = ask(c, "WeB.Ns.SVC.clusterset.LOCAL.")
    assert r.rcode() == dns.rcode.NOERROR
    assert r.flags & dns.flags.AA and not r.flags & dns.flags.RA and r.flags & dns.flags.RD
    assert str(r.question[0].name) == "WeB.Ns.SVC.clusterset.LOCAL."
    (rrset,) = r.answer
    assert str(rrset.name) == "WeB.Ns.SVC.clusterset.LOCAL." and rrset.ttl == 7
    assert [x.address for x in rrset] == ["243.0.0.7"]


def test_rd_clear_is_echoed() -> None:
    c = make_cache()
    q = dns.message.make_query(BASE, "A")
    q.flags &= ~dns.flags.RD
    r = dns.message.from_wire(c.answer(q.to_wire()) or b"")
    assert not r.flags & dns.flags.RD


def test_srv_and_txt_and_soa() -> None:
    c = make_cache()
    (srv,) = ask(c, f"_http._tcp.{BASE}", "SRV").answer
    (rec,) = list(srv)
    assert (rec.priority, rec.weight, rec.port, str(rec.target)) == (0, 100, 80, BASE + ".")
    (txt,) = ask(c, "dns-version.clusterset.local", "TXT").answer
    assert [s.strings for s in txt] == [(b"1.0.0",)]
    (soa,) = ask(c, "clusterset.local", "SOA").answer
    assert str(next(iter(soa)).mname) == "ns.dns.clusterset.local."


def test_nodata_nxdomain_refused() -> None:
    c = make_cache()
    r = ask(c, BASE, "AAAA")
    assert r.rcode() == dns.rcode.NOERROR and not r.answer
    assert r.authority[0].rdtype == dns.rdatatype.SOA and str(r.authority[0].name) == "clusterset.local."
    r = ask(c, "ns.svc.clusterset.local", "A")  # empty non-terminal: NODATA, not NXDOMAIN
    assert r.rcode() == dns.rcode.NOERROR and not r.answer
    r = ask(c, "nope.ns.svc.clusterset.local", "A")
    assert r.rcode() == dns.rcode.NXDOMAIN and r.authority[0].rdtype == dns.rdatatype.SOA
    assert r.flags & dns.flags.AA
    r = ask(c, "example.com", "A")
    assert r.rcode() == dns.rcode.REFUSED and not r.answer
    r = ask(c, "xclusterset.local", "A")  # suffix without a label boundary is not in the zone
    assert r.rcode() == dns.rcode.REFUSED


def test_servfail_before_ready() -> None:
    c = WireCache(["clusterset.local"])
    assert ask(c, BASE).rcode() == dns.rcode.SERVFAIL
    assert ask(c, "example.com").rcode() == dns.rcode.REFUSED


def test_edns_echo_and_truncation() -> None:
    c = WireCache(["clusterset.local"], ttl=5)
    imp = ImportSnap("ns", "big", "Headless", (), (), ())
    eps = tuple(Endpoint((f"127.9.{i // 250}.{i % 250 + 1}",)) for i in range(60))
    c.replace(
        "big",
        clusterset_records(
            imp, [SliceSnap("c2", eps)], local_cluster="c1", local=None, zone="clusterset.local"
        ),
    )
    c.set_ready()
    name = "big.ns.svc.clusterset.local"
    r = ask(c, name)  # 60 * 16 bytes > 512 without EDNS
    assert r.flags & dns.flags.TC and not r.answer
    r = ask(c, name, use_edns=0, payload=4096)
    assert not r.flags & dns.flags.TC and len(next(iter(r.answer))) == 60
    assert r.edns == 0 and r.payload == 1232
    r = ask(c, name, use_edns=0, payload=4096, want_dnssec=True)
    assert r.ednsflags & dns.flags.DO
    r = ask(c, name, tcp=True)
    assert not r.flags & dns.flags.TC and len(next(iter(r.answer))) == 60


def test_badvers() -> None:
    c = make_cache()
    r = ask(c, BASE, use_edns=1)
    assert r.rcode() == dns.rcode.BADVERS and not r.answer


def test_notimp_formerr_and_drops() -> None:
    c = make_cache()
    q = dns.message.make_query(BASE, "A")
    q.set_opcode(dns.opcode.UPDATE)
    r = dns.message.from_wire(c.answer(q.to_wire()) or b"")
    assert r.rcode() == dns.rcode.NOTIMP
    resp = c.answer(dns.message.make_query(BASE, "A").to_wire())
    assert resp is not None and c.answer(resp) is None  # never answer a response
    assert c.answer(b"\x00\x01") is None
    wire = bytearray(dns.message.make_query(BASE, "A").to_wire())
    wire[5] = 2  # QDCOUNT 2
    r = dns.message.from_wire(c.answer(bytes(wire)) or b"", question_only=True)
    assert r.rcode() == dns.rcode.FORMERR
    trunc = dns.message.make_query(BASE, "A").to_wire()[:20]
    assert c.answer(trunc) is not None and (c.answer(trunc) or b"")[3] & 0xF == dns.rcode.FORMERR
    r = ask(c, BASE, "OPT")
    assert r.rcode() == dns.rcode.FORMERR


def test_any_and_axfr() -> None:
    c = make_cache()
    r = ask(c, BASE, "ANY")
    assert {rr.rdtype for rr in r.answer} == {dns.rdatatype.A, dns.rdatatype.SRV}
    assert ask(c, "clusterset.local", "AXFR").rcode() == dns.rcode.REFUSED


def test_replace_swaps_and_refcounts_shared_names() -> None:
    c = make_cache()
    other = RecordSet()
    other.add("db.ns.svc.clusterset.local", A, [Addr("127.0.0.9")])
    other.names |= {"db.ns.svc.clusterset.local", "ns.svc.clusterset.local", "svc.clusterset.local"}
    c.replace("db", other)
    c.replace("web", None)
    assert ask(c, BASE).rcode() == dns.rcode.NXDOMAIN
    assert ask(c, "ns.svc.clusterset.local").rcode() == dns.rcode.NOERROR  # still held by db
    c.replace("db", None)
    assert ask(c, "ns.svc.clusterset.local").rcode() == dns.rcode.NXDOMAIN
    assert ask(c, "clusterset.local", "SOA").answer  # the apex stays


def test_ring_rotates() -> None:
    c = WireCache(["clusterset.local"])
    rs = RecordSet()
    rs.add_ring(BASE, A, [[Addr("127.0.0.1")], [Addr("127.0.0.2")]])
    rs.names.add(BASE)
    c.replace("x", rs)
    c.set_ready()
    seen = [next(iter(ask(c, BASE).answer[0])).address for _ in range(4)]
    assert seen == ["127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2"]


def test_cname_for_external_name() -> None:
    c = WireCache(["cluster.local"])
    rs = RecordSet()
    rs.cnames["ext.ns.svc.cluster.local"] = "example.org"
    rs.names.add("ext.ns.svc.cluster.local")
    c.replace("x", rs)
    c.set_ready()
    (cname,) = ask(c, "ext.ns.svc.cluster.local", "A").answer
    assert cname.rdtype == dns.rdatatype.CNAME and str(next(iter(cname)).target) == "example.org."


def test_srv_dedup_on_wire() -> None:
    c = make_cache()
    (srv,) = ask(c, BASE, "SRV").answer
    assert len(srv) == 1 and next(iter(srv)).port == 80


def test_name_to_wire() -> None:
    assert name_to_wire("A.b.") == b"\x01a\x01b\x00"
    assert name_to_wire("") == b"\x00"
    with pytest.raises(ValueError):
        name_to_wire("a" * 64 + ".b")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=600))
def test_random_bytes_never_raise(data: bytes) -> None:
    c = make_cache()
    query = dns.message.make_query(BASE, "A").to_wire()
    before = c.answer(query)
    resp = c.answer(data)
    if resp is not None:
        assert resp[:2] == data[:2] and resp[2] & 0x80  # a response to that ID
        dns.message.from_wire(resp, question_only=True)
    assert c.answer(query) == before


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.integers(0, 60))
def test_mutated_queries_never_raise(junk: bytes, at: int) -> None:
    c = make_cache()
    wire = bytearray(dns.message.make_query(BASE, "A", use_edns=0).to_wire())
    at = min(at, len(wire))
    mutated = bytes(wire[:at]) + junk + bytes(wire[at + len(junk) :])
    resp = c.answer(mutated)
    if resp is not None:
        assert resp[:2] == mutated[:2]
    assert struct.unpack(">H", (c.answer(bytes(wire)) or b"\0\0\0\0\0\0\0\0")[6:8])[0] == 1  # still answers


@pytest.mark.parametrize("edns", [False, True])
@pytest.mark.parametrize(("rd", "cd"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(
    ("name", "rdtype", "rcode", "answers"),
    [
        (BASE, "A", dns.rcode.NOERROR, 1),
        (BASE, "AAAA", dns.rcode.NOERROR, 0),  # NODATA
        (BASE.upper(), "AAAA", dns.rcode.NOERROR, 0),
        ("nope.ns.svc.clusterset.local", "A", dns.rcode.NXDOMAIN, 0),
        ("NoPe.ns.svc.clusterset.local", "A", dns.rcode.NXDOMAIN, 0),
    ],
)
def test_flags_rcode_and_soa_on_cached_and_negative_answers(
    rd: int, cd: int, edns: bool, name: str, rdtype: str, rcode: int, answers: int
) -> None:
    c = make_cache()
    q = dns.message.make_query(name, rdtype, use_edns=0 if edns else False)
    q.flags = (dns.flags.RD if rd else 0) | (dns.flags.CD if cd else 0)
    r = dns.message.from_wire(c.answer(q.to_wire()) or b"")
    assert q.is_response(r) and r.rcode() == rcode and len(r.answer) == answers
    assert str(r.question[0].name) == name + "."
    assert bool(r.flags & dns.flags.RD) == bool(rd) and bool(r.flags & dns.flags.CD) == bool(cd)
    assert r.flags & dns.flags.AA and r.flags & dns.flags.QR and (r.edns == 0) == edns
    if not answers:
        (soa,) = r.authority
        assert soa.rdtype == dns.rdatatype.SOA and str(soa.name) == "clusterset.local."


def test_a_zero_byte_inside_a_label_is_not_the_end_of_the_name() -> None:
    """The cached name's own wire form, as the content of one label: not an answer for it."""
    c = make_cache()
    inner = name_to_wire(BASE) + b"\x00\x01\x00\x01"
    qname = bytes([len(inner)]) + inner + name_to_wire("shop.svc.clusterset.local")
    wire = b"\x12\x34\x01\x00" + b"\x00\x01\x00\x00\x00\x00\x00\x00" + qname + b"\x00\x01\x00\x01"
    resp = c.answer(wire) or b""
    assert resp[:2] == b"\x12\x34" and resp[3] & 0x0F == dns.rcode.NXDOMAIN
    assert struct.unpack(">H", resp[6:8])[0] == 0  # no answer records
