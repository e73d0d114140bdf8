"""UDP served in batches (recvmmsg/sendmmsg through ctypes) and one datagram at a time
(recvfrom/sendto, the fallback off Linux): same answers, each to its own client, over real sockets
on 127.0.0.1 and ::1.

A burst is sent from many client sockets before the event loop runs the server's reader, so the
kernel queues all of it and the batched server receives it in one recvmmsg (checked, not assumed).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable

import dns.flags
import dns.message
import dns.rcode
import pytest

import isthmus.dns.server as server_mod
from isthmus.dns.mmsg import SLOT, MmsgSocket, load
from isthmus.dns.records import Endpoint, ImportSnap, Port, SliceSnap, clusterset_records
from isthmus.dns.server import DnsServer
from isthmus.dns.wire import WireCache

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(load() is None, reason="no recvmmsg/sendmmsg in this libc"),
]

Z = "clusterset.local"
VIP = f"web.shop.svc.{Z}"
BIG = f"big.shop.svc.{Z}"  # headless, 40 endpoints: 680+ bytes, over 512 without EDNS
HUGE = f"huge.shop.svc.{Z}"  # headless, 100 endpoints: over the 1232-byte EDNS limit

HAS_V6 = socket.has_ipv6
try:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as _s:
        _s.bind(("::1", 0))
except OSError:
    HAS_V6 = False


def cache() -> WireCache:
    c = WireCache([Z], versions={Z: "1.0.0"})
    ports = (Port("http", "TCP", 80),)
    c.replace("web", clusterset_records(
        ImportSnap("shop", "web", "ClusterSetIP", ("243.0.0.7",), ports, ("c2",)), [],
        local_cluster="c1", local=None, zone=Z,
    ))  # fmt: skip
    for name, n in (("big", 40), ("huge", 100)):
        eps = tuple(Endpoint((f"10.1.{i // 250}.{i % 250 + 1}",), True) for i in range(n))
        c.replace(name, clusterset_records(
            ImportSnap("shop", name, "Headless", (), ports, ("c2",)), [SliceSnap("c2", eps, ports)],
            local_cluster="c1", local=None, zone=Z,
        ))  # fmt: skip
    c.set_ready()
    return c


def queries() -> list[bytes]:
    """One query per client: hits, misses, EDNS (with and without DO), truncation either way."""
    qs = [
        dns.message.make_query(VIP, "A"),
        dns.message.make_query(VIP.upper(), "A"),  # case preserved in the answer
        dns.message.make_query(f"_http._tcp.{VIP}", "SRV"),
        dns.message.make_query(VIP, "AAAA"),  # NODATA
        dns.message.make_query(f"nx.shop.svc.{Z}", "A"),  # NXDOMAIN
        dns.message.make_query("example.com", "A"),  # REFUSED
        dns.message.make_query(f"dns-version.{Z}", "TXT", use_edns=0, payload=4096),
        dns.message.make_query(VIP, "A", use_edns=0, want_dnssec=True),
        dns.message.make_query(BIG, "A"),  # TC: no EDNS, over 512
        dns.message.make_query(BIG, "A", use_edns=0, payload=4096),  # fits in 1232 with EDNS
        dns.message.make_query(HUGE, "A", use_edns=0, payload=4096),  # TC: over --max-udp
    ]
    return [q.to_wire() for q in qs]


@contextlib.asynccontextmanager
async def serving(host: str, udp_batch: int, c: WireCache | None = None) -> AsyncIterator[DnsServer]:
    server = DnsServer(c or cache(), [(host, 0)], udp_batch=udp_batch)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def batch_sizes(server: DnsServer) -> list[int]:
    """Record what each recvmmsg of the server's (only) UDP socket returned."""
    mm = server._udp[0].mm
    assert mm is not None
    sizes: list[int] = []
    recv: Callable[[], int] = mm.recv

    def counting() -> int:
        n = recv()
        sizes.append(n)
        return n

    mm.recv = counting  # type: ignore[method-assign]
    return sizes


async def burst(host: str, port: int, datagrams: list[bytes], expect: list[bool]) -> list[bytes | None]:
    """Send each datagram from its own client socket, all before the loop runs the server; return
    each client's reply (None where `expect` says none comes, after checking none came)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks = [socket.socket(fam, socket.SOCK_DGRAM) for _ in datagrams]
    loop = asyncio.get_running_loop()
    try:
        for s in socks:
            s.bind((host, 0))
            s.setblocking(False)
        for s, d in zip(socks, datagrams, strict=True):
            s.sendto(d, (host, port))
        out: list[bytes | None] = []
        for s, want in zip(socks, expect, strict=True):
            out.append(await asyncio.wait_for(loop.sock_recv(s, 65535), 5) if want else None)
        await asyncio.sleep(0.05)
        for s in socks:  # nobody got a second reply, or one they should not have
            with pytest.raises(BlockingIOError):
                s.recv(65535)
        return out
    finally:
        for s in socks:
            s.close()


HOSTS = ["127.0.0.1", pytest.param("::1", marks=pytest.mark.skipif(not HAS_V6, reason="no IPv6 loopback"))]


@pytest.mark.parametrize("host", HOSTS)
async def test_batched_answers_equal_one_at_a_time_each_to_its_client(host: str) -> None:
    qs = queries()
    c = cache()  # one cache for both: two made a second apart have different SOA serials (time-based)
    async with serving(host, 64, c) as batched, serving(host, 0, c) as plain:
        assert batched.udp_io == "recvmmsg/sendmmsg x64" and plain.udp_io == "recvfrom/sendto"
        assert plain._udp[0].mm is None
        sizes = batch_sizes(batched)
        got = await burst(host, batched.bound[0][1], qs, [True] * len(qs))
        want = await burst(host, plain.bound[0][1], qs, [True] * len(qs))
    assert max(sizes) == len(qs)  # one recvmmsg took the whole burst
    assert got == want
    for q, raw in zip(qs, got, strict=True):
        assert raw is not None
        query, r = dns.message.from_wire(q), dns.message.from_wire(raw)
        assert query.is_response(r)  # same ID and question: the reply reached the right client
    by = {i: dns.message.from_wire(r or b"") for i, r in enumerate(got)}
    assert [x.address for x in by[0].answer[0]] == ["243.0.0.7"]
    assert str(by[1].question[0].name) == VIP.upper() + "."
    assert by[3].rcode() == dns.rcode.NOERROR and not by[3].answer
    assert by[4].rcode() == dns.rcode.NXDOMAIN and by[5].rcode() == dns.rcode.REFUSED
    assert by[6].edns == 0 and by[6].payload == 1232 and not by[6].ednsflags & dns.flags.DO
    assert by[7].ednsflags & dns.flags.DO
    assert by[8].flags & dns.flags.TC and not by[8].answer
    assert not by[9].flags & dns.flags.TC and len(by[9].answer[0]) == 40
    assert by[10].flags & dns.flags.TC and by[10].edns == 0 and len(got[10] or b"") <= 1232


@pytest.mark.parametrize("udp_batch", [64, 0])
async def test_malformed_datagrams_do_not_break_the_batch(udp_batch: int) -> None:
    good = dns.message.make_query(VIP, "A")
    response = dns.message.make_response(dns.message.make_query(VIP, "A")).to_wire()
    datagrams = [
        good.to_wire(),
        b"\x12\x34\x01",  # a runt: dropped
        good.to_wire(),
        response,  # a response: never answered
        b"\xab\xcd" + b"\x01\x00\x00\x01" + b"\x00" * 6 + b"\x3f" + b"x" * 5,  # question runs off: FORMERR
        b"",  # an empty datagram: dropped
        good.to_wire(),
    ]
    expect = [True, False, True, False, True, False, True]
    c = cache()
    async with serving("127.0.0.1", udp_batch, c) as server:
        sizes = batch_sizes(server) if udp_batch else []
        got = await burst("127.0.0.1", server.bound[0][1], datagrams, expect)
    if udp_batch:
        assert max(sizes) == len(datagrams)
    for i in (0, 2, 6):
        assert got[i] is not None and good.is_response(dns.message.from_wire(got[i] or b""))
    formerr = got[4] or b""
    assert formerr[:2] == b"\xab\xcd" and formerr[3] & 0x0F == dns.rcode.FORMERR
    assert c.stats.dropped == 3
    assert sum(c.stats.latency) == 4  # every answer sent is observed once


async def test_a_refused_reply_is_dropped_and_the_rest_sent() -> None:
    """sendmmsg stops at a message the kernel refuses; the ones after it still go out."""
    lib = load()
    assert lib is not None
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    try:
        srv.bind(("127.0.0.1", 0))
        srv.setblocking(False)
        mm = MmsgSocket(srv, lib, 8)
        for i, cl in enumerate(clients):
            cl.bind(("127.0.0.1", 0))
            cl.settimeout(5)
            cl.sendto(b"q%d" % i, srv.getsockname())
        await asyncio.sleep(0.05)
        assert mm.recv() == 3
        for j in range(3):
            data = mm.rbuf[j * SLOT : j * SLOT + mm.lens[mm.len_index[j]]]
            assert data == b"q%d" % j
            mm.sbuf[j * SLOT : j * SLOT + 2] = b"r%d" % j
            mm.slens[2 * j + 1] = 2
        mm.slens[3] = 65535  # slot 1: larger than any UDP datagram, EMSGSIZE
        assert mm.send(3) == 1
        assert clients[0].recv(100) == b"r0" and clients[2].recv(100) == b"r2"
        clients[1].setblocking(False)
        with pytest.raises(BlockingIOError):
            clients[1].recv(100)
        assert mm.recv() == 0  # drained
        mm.close()
    finally:
        srv.close()
        for cl in clients:
            cl.close()


async def test_without_libc_calls_the_server_reads_one_datagram_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_mod, "_MMSG", None)
    q = dns.message.make_query(VIP, "A")
    async with serving("127.0.0.1", 64) as server:
        assert server.udp_io == "recvfrom/sendto" and server._udp[0].mm is None
        (raw,) = await burst("127.0.0.1", server.bound[0][1], [q.to_wire()], [True])
    assert q.is_response(dns.message.from_wire(raw or b""))
