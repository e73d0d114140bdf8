"""TCP and UDP relaying over real loopback sockets, without an apiserver (isthmus.proxy.tcp/udp).

Every test runs on both event loops the proxy can run on (`isthmus.runtime.loop`): uvloop's
transports differ from asyncio's (not `asyncio.Transport` subclasses, other buffering), and the
proxy runs on uvloop by default while pytest-asyncio's loop is asyncio's.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from isthmus.proxy import Backend, Balancer, ListenerKey, bind_socket, splice
from isthmus.proxy.metrics import ListenerStats
from isthmus.proxy.tcp import EARLY_LIMIT, TcpListener
from isthmus.proxy.udp import UdpListener
from isthmus.runtime.loop import run
from tests.harness.backends import TcpEcho, UdpEcho, random_net, tcp_ask, udp_ask
from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(60)

PORT = 18080


LOOPS = ("asyncio", "uvloop")
KERNEL = splice.shared()
"""The kernel splice, where this kernel and these privileges allow it (root on Linux 5.x+)."""
needs_splice = pytest.mark.skipif(KERNEL is None, reason="BPF sockmap refused here (needs root and Linux 5.x+)")
_splice_now: list[bool] = [False]
"""Set by `on_each_loop_and_splice`: the listeners `tcp_listener` makes splice at the first read."""


@pytest.fixture
def net() -> int:
    return random_net()


def on_each_loop(scenario: Callable[[int], Coroutine[Any, Any, None]]) -> Callable[[int, str], None]:
    """The async test `scenario(net)` as a sync test run once per event loop (a fresh loop each)."""

    @pytest.mark.parametrize("loop", LOOPS)
    def test(net: int, loop: str) -> None:
        run(scenario(net), choice=loop)

    test.__name__ = scenario.__name__
    test.__doc__ = scenario.__doc__
    return test


def on_each_loop_and_splice(scenario: Callable[[int], Coroutine[Any, Any, None]]) -> Callable[[int, str, str], None]:
    """As `on_each_loop`, once relayed by the proxy and once spliced in the kernel from the client's
    first read (the stream semantics must not tell them apart)."""

    @pytest.mark.parametrize("loop", LOOPS)
    @pytest.mark.parametrize("relay", ["proxy", pytest.param("kernel", marks=needs_splice)])
    def test(net: int, loop: str, relay: str) -> None:
        _splice_now[0] = relay == "kernel"
        try:
            run(scenario(net), choice=loop)
        finally:
            _splice_now[0] = False

    test.__name__ = scenario.__name__
    test.__doc__ = scenario.__doc__
    return test


async def tcp_listener(
    ip: str, backends: list[Backend], affinity: float | None = None, connect_timeout: float = 2.0
) -> TcpListener:
    kernel = KERNEL if _splice_now[0] else None
    lis = TcpListener(
        Balancer(backends, affinity), ListenerStats(), connect_timeout=connect_timeout, kernel=kernel, splice_after=1
    )
    await lis.start(bind_socket(ListenerKey("TCP", ip, PORT)))
    return lis


@on_each_loop_and_splice
async def test_tcp_round_robin_and_client_ip(net: int) -> None:
    a = await TcpEcho("a", f"127.203.{net}.1", PORT).start()
    b = await TcpEcho("b", f"127.203.{net}.2", PORT).start()
    lis = await tcp_listener(f"127.204.{net}.10", [Backend(a.host, PORT), Backend(b.host, PORT)])
    try:
        answers = [await tcp_ask(f"127.204.{net}.10", PORT, source="127.0.0.2") for _ in range(4)]
        assert [x.split("|")[0] for x in answers] == ["a", "b", "a", "b"]
        assert lis.stats.connections == 4
        await eventually(lambda: lis.stats.active == 0)
        assert lis.stats.bytes_in == 4 * 3
    finally:
        lis.close()
        await a.stop()
        await b.stop()


@on_each_loop
async def test_tcp_nodelay_on_both_legs(net: int) -> None:
    """Small writes are relayed at once both ways (Nagle would hold a second segment for an ACK)."""
    a = await TcpEcho("a", f"127.203.{net}.1", PORT).start()
    lis = await tcp_listener(f"127.204.{net}.10", [Backend(a.host, PORT)])
    try:
        reader, writer = await asyncio.open_connection(f"127.204.{net}.10", PORT)
        writer.write(b"1\n")
        assert (await reader.readline()).startswith(b"a|")
        (down,) = lis.connections
        for side in (down, down.peer):
            assert side is not None and side.transport is not None
            sock = side.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        writer.close()
    finally:
        lis.close()
        await a.stop()


@on_each_loop_and_splice
async def test_tcp_half_close_is_relayed(net: int) -> None:
    a = await TcpEcho("a", f"127.203.{net}.1", PORT).start()
    lis = await tcp_listener(f"127.204.{net}.10", [Backend(a.host, PORT)])
    try:
        reader, writer = await asyncio.open_connection(f"127.204.{net}.10", PORT)
        writer.write(b"one\ntwo\n")
        writer.write_eof()  # the backend sees EOF, answers, then closes
        data = await asyncio.wait_for(reader.read(), 5)
        assert data.decode().splitlines() == ["a|127.0.0.1|one", "a|127.0.0.1|two", "bye a"]
        writer.close()
    finally:
        lis.close()
        await a.stop()


@on_each_loop_and_splice
async def test_tcp_large_transfer_both_ways(net: int) -> None:
    """Several MB through the relay with a slow reader: backpressure must not lose or reorder bytes."""
    host = f"127.203.{net}.1"

    async def sink_and_source(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        total = 0
        while chunk := await reader.read(65536):
            total += len(chunk)
        blob = os.urandom(1024) * 4096
        writer.write(f"{total}\n".encode() + blob)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(sink_and_source, host, PORT, reuse_address=True)
    lis = await tcp_listener(f"127.204.{net}.10", [Backend(host, PORT)])
    try:
        reader, writer = await asyncio.open_connection(f"127.204.{net}.10", PORT)
        payload = os.urandom(1 << 20) * 5
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        header = await asyncio.wait_for(reader.readline(), 10)
        assert int(header) == len(payload)
        got = bytearray()
        while chunk := await asyncio.wait_for(reader.read(7000), 10):
            got += chunk
            if len(got) % 100 == 0:
                await asyncio.sleep(0)
        assert len(got) == 4 << 20
        assert bytes(got[:1024]) * 4096 == bytes(got)
        writer.close()
    finally:
        lis.close()
        server.close()


@on_each_loop
async def test_tcp_no_endpoints_resets(net: int) -> None:
    lis = await tcp_listener(f"127.204.{net}.10", [])
    try:
        with pytest.raises((ConnectionResetError, ConnectionError)):
            await tcp_ask(f"127.204.{net}.10", PORT)
        assert lis.stats.no_endpoints == 1
    finally:
        lis.close()


@on_each_loop
async def test_tcp_fails_over_to_a_live_backend(net: int) -> None:
    dead = Backend(f"127.203.{net}.9", PORT)  # nothing listens: refused
    a = await TcpEcho("a", f"127.203.{net}.1", PORT).start()
    lis = await tcp_listener(f"127.204.{net}.10", [Backend(a.host, PORT), dead], affinity=60)
    try:
        for src in ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"):
            assert (await tcp_ask(f"127.204.{net}.10", PORT, source=src)).startswith("a|")
        assert lis.stats.connect_failed >= 1
        assert a.accepted == 4
    finally:
        lis.close()
        await a.stop()


@on_each_loop
async def test_tcp_all_backends_dead_resets(net: int) -> None:
    lis = await tcp_listener(
        f"127.204.{net}.10", [Backend(f"127.203.{net}.8", PORT), Backend(f"127.203.{net}.9", PORT)]
    )
    try:
        with pytest.raises(ConnectionError):
            await tcp_ask(f"127.204.{net}.10", PORT)
        assert lis.stats.connect_failed == 2
    finally:
        lis.close()


@on_each_loop
async def test_tcp_connect_timeout_moves_on(net: int) -> None:
    """A backend whose accept queue is full never completes the handshake; the next one answers."""
    stuck_host = f"127.203.{net}.7"
    held = stuck_backend(stuck_host)
    await asyncio.sleep(0.2)
    a = await TcpEcho("a", f"127.203.{net}.1", PORT).start()
    lis = await tcp_listener(
        f"127.204.{net}.10", [Backend(stuck_host, PORT), Backend(a.host, PORT)], connect_timeout=0.3
    )
    try:
        answers = [await tcp_ask(f"127.204.{net}.10", PORT, timeout=5) for _ in range(2)]
        assert all(x.startswith("a|") for x in answers)
        assert lis.stats.connect_timeout >= 1
    finally:
        lis.close()
        await a.stop()
        for s in held:
            s.close()


def stuck_backend(host: str) -> list[socket.socket]:
    """A listener whose accept queue is full: connects to it never complete. Close the sockets after."""
    stuck = socket.socket()
    stuck.bind((host, PORT))
    stuck.listen(0)
    held = [stuck]
    for _ in range(4):  # fill the backlog so further SYNs are dropped
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect((host, PORT))
        except BlockingIOError:
            pass
        held.append(s)
    return held


@on_each_loop_and_splice
async def test_tcp_client_bytes_and_eof_before_the_backend_answers(net: int) -> None:
    """What the client sends (more than the early buffer) and its EOF while the first backend times
    out reach the second backend intact and in order, and the answer comes back."""
    held = stuck_backend(f"127.203.{net}.7")
    await asyncio.sleep(0.2)
    host = f"127.203.{net}.1"

    async def digest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # to EOF
        writer.write(f"{len(data)} {hashlib.sha256(data).hexdigest()}\n".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(digest, host, PORT, reuse_address=True)
    lis = await tcp_listener(
        f"127.204.{net}.10", [Backend(f"127.203.{net}.7", PORT), Backend(host, PORT)], connect_timeout=0.3
    )
    try:
        reader, writer = await asyncio.open_connection(f"127.204.{net}.10", PORT)
        payload = os.urandom(EARLY_LIMIT * 3 + 17)
        writer.write(payload)
        writer.write_eof()
        answer = await asyncio.wait_for(reader.read(), 10)
        assert answer.decode() == f"{len(payload)} {hashlib.sha256(payload).hexdigest()}\n"
        assert lis.stats.connect_timeout == 1
        assert lis.stats.bytes_in == len(payload)
        writer.close()
    finally:
        lis.close()
        server.close()
        for s in held:
            s.close()


@on_each_loop_and_splice
async def test_tcp_half_close_from_the_backend(net: int) -> None:
    """The backend closes its sending side first; the client still sends, and its bytes arrive."""
    host = f"127.203.{net}.1"

    async def hello_then_count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello\n")
        writer.write_eof()
        data = await reader.read()
        counted.set_result(data)
        writer.close()

    counted: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    server = await asyncio.start_server(hello_then_count, host, PORT, reuse_address=True)
    lis = await tcp_listener(f"127.204.{net}.10", [Backend(host, PORT)])
    try:
        reader, writer = await asyncio.open_connection(f"127.204.{net}.10", PORT)
        assert await asyncio.wait_for(reader.read(), 5) == b"hello\n"  # EOF after it
        payload = os.urandom(300_000)
        writer.write(payload)
        writer.write_eof()
        assert await asyncio.wait_for(counted, 5) == payload
        writer.close()
        await eventually(lambda: lis.stats.active == 0)
    finally:
        lis.close()
        server.close()


@on_each_loop
async def test_tcp_existing_connection_keeps_its_backend(net: int) -> None:
    a = await TcpEcho("a", f"127.203.{net}.1", PORT).start()
    b = await TcpEcho("b", f"127.203.{net}.2", PORT).start()
    balancer = Balancer([Backend(a.host, PORT)], None)
    lis = TcpListener(balancer, ListenerStats())
    await lis.start(bind_socket(ListenerKey("TCP", f"127.204.{net}.10", PORT)))
    try:
        reader, writer = await asyncio.open_connection(f"127.204.{net}.10", PORT)
        writer.write(b"1\n")
        assert (await reader.readline()).startswith(b"a|")
        balancer.update([Backend(b.host, PORT)], None)
        lis.close()  # even the listener going away leaves relayed connections alone
        writer.write(b"2\n")
        assert (await reader.readline()).startswith(b"a|")
        writer.close()
    finally:
        await a.stop()
        await b.stop()


@on_each_loop
async def test_udp_flows_affinity_and_replies_from_the_listener(net: int) -> None:
    a = await UdpEcho("a", f"127.203.{net}.1", PORT).start()
    b = await UdpEcho("b", f"127.203.{net}.2", PORT).start()
    vip = f"127.204.{net}.10"
    lis = UdpListener(
        Balancer([Backend(a.host, PORT), Backend(b.host, PORT)], None), ListenerStats(), idle_timeout=0.5
    )
    await lis.start(bind_socket(ListenerKey("UDP", vip, PORT)))
    try:
        names = [(await udp_ask(vip, PORT, source="127.0.0.2")).split("|")[0] for _ in range(4)]
        assert sorted(names) == ["a", "a", "b", "b"]  # each fresh socket is a new flow: round-robin
        # one socket, many datagrams: one flow, one backend, replies from the VIP
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.bind(("127.0.0.3", 0))
        sock.connect((vip, PORT))  # a connected UDP socket takes datagrams from the VIP only
        loop = asyncio.get_running_loop()  # (uvloop has no sock_sendto/sock_recvfrom)
        seen = set()
        for i in range(5):
            await loop.sock_sendall(sock, f"{i}".encode())
            data = await asyncio.wait_for(loop.sock_recv(sock, 65535), 2)
            seen.add(data.split(b"|")[0])
        assert len(seen) == 1
        assert lis.stats.datagrams_in == 9 and lis.stats.datagrams_out == 9
        await eventually(lambda: not lis.flows, timeout=5)  # idle flows expire
        sock.close()
    finally:
        lis.close()
        await a.stop()
        await b.stop()


@on_each_loop
async def test_udp_no_endpoints_drops(net: int) -> None:
    vip = f"127.204.{net}.10"
    lis = UdpListener(Balancer([], None), ListenerStats())
    await lis.start(bind_socket(ListenerKey("UDP", vip, PORT)))
    try:
        with pytest.raises(TimeoutError):
            await udp_ask(vip, PORT, timeout=0.3)
        assert lis.stats.no_endpoints == 1
    finally:
        lis.close()


@on_each_loop
async def test_udp_flow_to_a_removed_backend_moves(net: int) -> None:
    a = await UdpEcho("a", f"127.203.{net}.1", PORT).start()
    b = await UdpEcho("b", f"127.203.{net}.2", PORT).start()
    vip = f"127.204.{net}.10"
    balancer = Balancer([Backend(a.host, PORT)], None)
    lis = UdpListener(balancer, ListenerStats())
    await lis.start(bind_socket(ListenerKey("UDP", vip, PORT)))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sock.connect((vip, PORT))
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(sock, b"x")
        assert (await asyncio.wait_for(loop.sock_recv(sock, 100), 2)).startswith(b"a|")
        balancer.update([Backend(b.host, PORT)], None)
        lis.backends_changed()
        await loop.sock_sendall(sock, b"y")
        assert (await asyncio.wait_for(loop.sock_recv(sock, 100), 2)).startswith(b"b|")
    finally:
        sock.close()
        lis.close()
        await a.stop()
        await b.stop()


@on_each_loop
async def test_udp_refused_backend_is_unpinned(net: int) -> None:
    a = await UdpEcho("a", f"127.203.{net}.1", PORT).start()
    dead = Backend(f"127.203.{net}.9", PORT)
    vip = f"127.204.{net}.10"
    lis = UdpListener(Balancer([dead, Backend(a.host, PORT)], 60), ListenerStats())
    await lis.start(bind_socket(ListenerKey("UDP", vip, PORT)))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sock.bind(("127.0.0.2", 0))
    sock.connect((vip, PORT))
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(sock, b"x")  # to the dead one: ICMP refused closes the flow
        await eventually(lambda: lis.stats.upstream_error == 1, timeout=3)
        await loop.sock_sendall(sock, b"y")
        assert (await asyncio.wait_for(loop.sock_recv(sock, 100), 2)).startswith(b"a|")
    finally:
        sock.close()
        lis.close()
        await a.stop()


@on_each_loop
async def test_reuse_port_lets_two_proxies_share_a_vip(net: int) -> None:
    vip = ListenerKey("TCP", f"127.204.{net}.20", PORT)
    s1 = bind_socket(vip, reuse_port=True)
    s2 = bind_socket(vip, reuse_port=True)
    s1.listen()
    s2.listen()
    with pytest.raises(OSError):
        bind_socket(vip)  # a plain listener cannot join them
    s1.close()
    s2.close()
    u = ListenerKey("UDP", f"127.204.{net}.20", PORT)
    s3 = bind_socket(u)
    with pytest.raises(OSError):
        bind_socket(u)  # two ClusterIP UDP listeners never silently share
    s3.close()


# -- the kernel splice (isthmus.proxy.splice) --------------------------------------------------------


async def spliced_pair(net: int, backend: str) -> tuple[TcpListener, asyncio.StreamReader, asyncio.StreamWriter]:
    """A listener splicing at the client's second read, and a client whose second line was spliced."""
    lis = TcpListener(Balancer([Backend(backend, PORT)], None), ListenerStats(), kernel=KERNEL, splice_after=2)
    await lis.start(bind_socket(ListenerKey("TCP", f"127.204.{net}.10", PORT)))
    reader, writer = await asyncio.open_connection(f"127.204.{net}.10", PORT)
    for n in (1, 2):
        writer.write(f"{n}\n".encode())
        assert (await asyncio.wait_for(reader.readline(), 5)).endswith(f"|{n}\n".encode())
    assert lis.stats.spliced == 1
    return lis, reader, writer


@needs_splice
@on_each_loop
async def test_a_spliced_connection_is_relayed_by_the_kernel_and_counted(net: int) -> None:
    """After the second client read the proxy no longer reads the connection: the bytes go through
    the sockmap program, EOF and close still follow, and the byte counters count them."""
    a = await TcpEcho("a", f"127.203.{net}.1", PORT).start()
    lis, reader, writer = await spliced_pair(net, a.host)
    try:
        (down,) = lis.connections
        assert down.fd >= 0 and down.peer is not None and down.peer.fd >= 0
        assert not down.transport.is_reading()  # type: ignore[union-attr]
        lines = [f"line {i}\n".encode() for i in range(200)]
        writer.write(b"".join(lines))
        for line in lines:
            assert await asyncio.wait_for(reader.readline(), 5) == b"a|127.0.0.1|" + line
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b"bye a\n"
        writer.close()
        await eventually(lambda: lis.stats.active == 0)
        sent_up = 4 + sum(map(len, lines))
        assert lis.stats.bytes_in == sent_up
        assert lis.stats.bytes_out == sent_up + 2 * len("a|127.0.0.1|") + 200 * len("a|127.0.0.1|") + len("bye a\n")
        assert KERNEL is not None and KERNEL.pairs == 0
    finally:
        lis.close()
        await a.stop()


@needs_splice
@on_each_loop
async def test_a_reset_on_either_side_of_a_spliced_connection_resets_the_other(net: int) -> None:
    host = f"127.203.{net}.1"
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def echo_and_hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(writer)
        try:
            while line := await reader.readline():
                writer.write(b"b|x|" + line)
        except (ConnectionError, OSError) as e:
            resets.append(e)

    resets: list[BaseException] = []
    server = await asyncio.start_server(echo_and_hold, host, PORT, reuse_address=True)
    try:
        # the backend resets: the client sees a reset
        lis, reader, writer = await spliced_pair(net, host)
        backend_side = await accepted.get()
        sock = backend_side.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        backend_side.transport.abort()
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await eventually(lambda: lis.stats.active == 0)
        lis.close()
        # the client resets: the backend sees a reset
        lis, reader, writer = await spliced_pair(net, host)
        await accepted.get()
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        await eventually(lambda: len(resets) == 1)
        await eventually(lambda: lis.stats.active == 0)
        lis.close()
    finally:
        server.close()
