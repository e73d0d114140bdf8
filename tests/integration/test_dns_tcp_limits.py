"""DNS over TCP against slow and surplus connections, over real sockets on 127.0.0.0/8.

The flood is a child process holding many connections that each trickle one byte now and then and
redial when closed (one local client, as in the bug report); real queries are dnspython's
`dns.query.tcp`. Run this file as a script to measure how many of N queries are answered during a
1,100-connection flood with the server's default limits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import resource
import socket
import struct
import sys
from collections.abc import AsyncIterator
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest
from prometheus_client import generate_latest

from isthmus.dns.server import DnsServer, TcpLimits
from isthmus.dns.wire import WireCache
from isthmus.runtime import REGISTRY

pytestmark = pytest.mark.timeout(60)

ZONE = "clusterset.local"
NAME = f"dns-version.{ZONE}"
"""A name every ready cache answers (TXT), so no apiserver is needed."""

FLOOD = r"""
import resource, socket, sys, time

host, port, src, n, every, lasts = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
end = time.monotonic() + lasts

def dial():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((src, 0))
        s.settimeout(0.3)  # a dropped SYN waits 1 s for its retransmission: retry next round instead
        s.connect((host, port))
        s.send(b"\xff")  # the first byte of a 65,535-byte length prefix: no query ever completes
        s.setblocking(False)
        return s
    except OSError:
        s.close()
        return None

conns = [dial() for _ in range(n)]
print("ready", sum(s is not None for s in conns), flush=True)
while time.monotonic() < end:
    next_round = time.monotonic() + every
    for i, s in enumerate(conns):
        if s is not None:
            try:
                closed = s.recv(1) == b""
            except BlockingIOError:
                closed = False
            except OSError:
                closed = True
            if not closed:
                try:
                    s.send(b"\xff")
                    continue
                except OSError:
                    pass
            s.close()
        conns[i] = dial()
        if time.monotonic() >= end:
            break
    time.sleep(max(0.0, min(next_round, end) - time.monotonic()))
"""


def raise_nofile(need: int) -> None:
    """Raise the soft limit: the server holds its cap plus sockets not yet accepted or closed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise RuntimeError(f"RLIMIT_NOFILE hard limit {hard} < {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def ready_cache() -> WireCache:
    cache = WireCache([ZONE], versions={ZONE: "1.0.0"})
    cache.set_ready()
    return cache


@contextlib.asynccontextmanager
async def serving(**kwargs: Any) -> AsyncIterator[DnsServer]:
    server = DnsServer(ready_cache(), [("127.0.0.1", 0)], **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def flood(
    host: str, port: int, *, conns: int, every: float, lasts: float, src: str = "127.0.0.1"
) -> AsyncIterator[int]:
    """Slow-loris connections from `src` for at most `lasts` seconds; yields how many connected."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FLOOD, host, str(port), src, str(conns), str(every), str(lasts),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), lasts)
        assert line.startswith(b"ready"), line
        yield int(line.split()[1])
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def answered(host: str, port: int, queries: int, source: str, timeout: float = 2.0) -> int:
    """How many of `queries` sequential TCP queries (each on a new connection) get their answer."""
    ok = 0
    for _ in range(queries):
        try:
            r = dns.query.tcp(
                dns.message.make_query(NAME, "TXT"), host, port=port, timeout=timeout, source=source
            )
        except (OSError, EOFError, dns.exception.DNSException):
            continue
        ok += r.rcode() == dns.rcode.NOERROR and bool(r.answer)
    return ok


async def measure(queries: int, conns: int, every: float, **kwargs: Any) -> dict[str, int]:
    raise_nofile(2 * conns + 256)
    async with serving(**kwargs) as server:
        host, port = server.bound[0]
        async with flood(host, port, conns=conns, every=every, lasts=60) as connected:
            await asyncio.sleep(every)  # let every connection trickle at least once
            same = await asyncio.to_thread(answered, host, port, queries, "127.0.0.1")
            other = await asyncio.to_thread(answered, host, port, queries, "127.0.0.2")
    return {"flood_connected": connected, "same_address": same, "other_address": other}


# --- single connections --------------------------------------------------------------------------------


def query_wire(qid: int = 0) -> bytes:
    """One length-prefixed TXT query for NAME."""
    wire = dns.message.make_query(NAME, "TXT", id=qid).to_wire()
    return struct.pack(">H", len(wire)) + wire


async def connect(
    server: DnsServer, src: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.bound[0]
    return await asyncio.open_connection(host, port, local_addr=(src, 0))


async def read_answer(reader: asyncio.StreamReader) -> dns.message.Message:
    size = struct.unpack(">H", await asyncio.wait_for(reader.readexactly(2), 5))[0]
    msg = dns.message.from_wire(await asyncio.wait_for(reader.readexactly(size), 5))
    assert msg.rcode() == dns.rcode.NOERROR and msg.answer
    return msg


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rest: bytes | None = None) -> None:
    """Send a whole query (or the `rest` of one already begun) and read its answer."""
    writer.write(query_wire() if rest is None else rest)
    await writer.drain()
    await read_answer(reader)


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), within) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


async def stalled(
    server: DnsServer, src: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that sent the first 5 bytes of a query; `ask(..., rest=REST)` completes it."""
    reader, writer = await connect(server, src)
    writer.write(query_wire()[:5])
    await writer.drain()
    return reader, writer


REST = query_wire()[5:]


async def settle(server: DnsServer, connections: int) -> None:
    """Until the server has seen every connection opened so far (accepting is asynchronous)."""
    for _ in range(500):
        if server.cache.stats.tcp_connections == connections:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{server.cache.stats.tcp_connections} connections, want {connections}")


# --- tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "limits",
    [TcpLimits(), TcpLimits(max_per_source=4096, query_timeout=30)],
    ids=["defaults", "global-cap-only"],
)
async def test_slow_loris_flood_from_one_address_does_not_deny_tcp(
    limits: TcpLimits, caplog: pytest.LogCaptureFixture
) -> None:
    """1,100 connections trickling a byte each 0.5 s and redialling when closed: TCP queries from
    the flooding address and from another one are still answered, and the server logs a line or
    two, not one per connection it closed."""
    raise_nofile(2 * 1100 + 256)
    caplog.set_level(logging.WARNING, logger="isthmus.dns.server")
    async with serving(tcp=limits) as server:
        host, port = server.bound[0]
        async with flood(host, port, conns=1100, every=0.5, lasts=40) as connected:
            assert connected > 1024  # more than the whole default table
            same = await asyncio.to_thread(answered, host, port, 20, "127.0.0.1")
            other = await asyncio.to_thread(answered, host, port, 20, "127.0.0.2")
            open_conns = server.cache.stats.tcp_connections
        closed = dict(server.cache.stats.tcp_closed)
    assert (same, other) == (20, 20)
    cap, reason = min((limits.max_per_source, "source_limit"), (limits.max_connections, "global_limit"))
    assert open_conns <= cap + 1  # the flood's share, and perhaps one of our queries
    assert closed[reason] > 0 and sum(closed.values()) >= connected - cap - 1, closed
    lines = [r for r in caplog.records if r.name == "isthmus.dns.server" and r.levelno == logging.WARNING]
    assert 1 <= len(lines) <= 3, [r.getMessage() for r in lines]


async def test_global_cap_closes_the_oldest_idle_connection_first() -> None:
    async with serving(tcp=TcpLimits(max_connections=3, query_timeout=30, idle_timeout=30)) as server:
        b = await stalled(server)
        c = await stalled(server)
        a = await connect(server)
        await ask(*a)  # a is idle now, and the newest
        await settle(server, 3)
        d = await connect(server, "127.0.0.2")
        await ask(*d)
        assert await closed_by_server(a[0], 5)
        await ask(*b, rest=REST)  # older, but waiting for its query rather than idle: kept
        await ask(*c, rest=REST)
        assert server.cache.stats.tcp_closed["global_limit"] == 1
        for _, w in (b, c, d):
            w.close()


async def test_global_cap_without_idle_connections_closes_the_longest_waiting() -> None:
    async with serving(tcp=TcpLimits(max_connections=3, query_timeout=30, idle_timeout=30)) as server:
        b = await stalled(server)
        c = await stalled(server)
        d = await stalled(server)
        await settle(server, 3)
        e = await connect(server, "127.0.0.2")
        await ask(*e)
        assert await closed_by_server(b[0], 5)
        await ask(*c, rest=REST)
        await ask(*d, rest=REST)
        body = generate_latest(REGISTRY).decode()
        assert 'isthmus_dns_tcp_closed_total{reason="global_limit"}' in body
        assert "isthmus_dns_tcp_connections " in body
        for _, w in (c, d, e):
            w.close()


async def test_per_source_cap_closes_that_addresses_oldest_idle_connection() -> None:
    async with serving(tcp=TcpLimits(max_per_source=2, query_timeout=30, idle_timeout=30)) as server:
        elsewhere = await stalled(server, "127.0.0.2")
        b = await stalled(server)
        a = await connect(server)
        await ask(*a)
        await settle(server, 3)
        newcomer = await connect(server)
        await ask(*newcomer)  # admitted: the same address's idle connection made room
        assert await closed_by_server(a[0], 5)
        await ask(*b, rest=REST)
        await ask(*elsewhere, rest=REST)  # another address's connection is never touched
        assert server.cache.stats.tcp_closed["source_limit"] == 1
        for _, w in (b, newcomer, elsewhere):
            w.close()


async def test_a_query_already_delivered_is_not_closed_to_make_room() -> None:
    """Accepting runs ahead of reading: the loop takes a whole batch of connections before it reads
    any. The test connects while holding the loop, so the server sees all three at once."""
    async with serving(tcp=TcpLimits(max_per_source=2, query_timeout=30, idle_timeout=30)) as server:
        first = await stalled(server)
        await settle(server, 1)
        prompt, *late = (socket.create_connection(server.bound[0]) for _ in range(3))
        prompt.sendall(query_wire())
        for s in late:
            s.sendall(query_wire()[:1])
        reader, writer = await asyncio.open_connection(sock=prompt)
        await read_answer(reader)  # while the two late ones each made room, in turn
        assert await closed_by_server(first[0], 5)
        assert server.cache.stats.tcp_closed["source_limit"] == 2
        writer.close()
        first[1].close()
        for s in late:
            s.close()


@pytest.mark.parametrize("after_an_answer", [False, True], ids=["new-connection", "next-query"])
async def test_trickled_query_is_closed_at_the_deadline(after_an_answer: bool) -> None:
    """One byte every 0.1 s: every byte is activity, but the query is never whole in time."""
    async with serving(tcp=TcpLimits(query_timeout=0.5, idle_timeout=30)) as server:
        reader, writer = await connect(server)
        if after_an_answer:
            await ask(reader, writer)
        wire = query_wire()
        for i in range(len(wire) - 1):  # never the last byte: the query must stay incomplete
            writer.write(wire[i : i + 1])
            if await closed_by_server(reader, 0.1):
                break
        else:
            pytest.fail(f"{len(wire) - 1} trickled bytes over ~{(len(wire) - 1) / 10} s kept the connection")
        writer.close()
        assert server.cache.stats.tcp_closed["query_timeout"] == 1


async def test_silent_new_connection_is_closed_at_the_deadline() -> None:
    async with serving(tcp=TcpLimits(query_timeout=0.5, idle_timeout=30)) as server:
        reader, writer = await connect(server)
        assert await closed_by_server(reader, 5)
        writer.close()


async def test_idle_gap_between_queries_is_the_idle_timeout_not_the_deadline() -> None:
    async with serving(tcp=TcpLimits(query_timeout=0.3, idle_timeout=2)) as server:
        reader, writer = await connect(server)
        await ask(reader, writer)
        await asyncio.sleep(0.9)  # three query deadlines, under the idle timeout
        await ask(reader, writer)
        assert await closed_by_server(reader, 10)
        writer.close()
        assert server.cache.stats.tcp_closed == {
            "query_timeout": 0, "idle_timeout": 1, "source_limit": 0, "global_limit": 0
        }  # fmt: skip


async def test_pipelined_queries_split_across_writes() -> None:
    async with serving(tcp=TcpLimits(query_timeout=1, idle_timeout=30)) as server:
        reader, writer = await connect(server)
        payload = b"".join(query_wire(qid) for qid in (1, 2, 3))
        cut = len(payload) - 7
        writer.write(payload[:cut])  # two whole queries and most of the third
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(payload[cut:])
        await writer.drain()
        assert [(await read_answer(reader)).id for _ in range(3)] == [1, 2, 3]
        writer.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--conns", type=int, default=1100)
    p.add_argument("--every", type=float, default=5.0, help="seconds between a connection's bytes")
    a = p.parse_args()
    got = asyncio.run(measure(a.queries, a.conns, a.every))
    print(
        f"{a.conns}-connection slow-loris flood from 127.0.0.1 ({got['flood_connected']} connected): "
        f"{got['same_address']}/{a.queries} TCP queries answered from 127.0.0.1, "
        f"{got['other_address']}/{a.queries} from 127.0.0.2"
    )
