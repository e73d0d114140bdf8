"""Connect-time balancing against real sockets (isthmus.proxy.socketlb): the cgroup programs
rewrite this network namespace's connect() and getpeername(), and leave with their SocketLB."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from isthmus.proxy.socketlb import SocketLB, SocketLBUnavailable
from tests.harness.backends import random_net

pytestmark = pytest.mark.timeout(60)

PORT = 18080


@pytest.fixture
def lb() -> Iterator[SocketLB]:
    try:
        lb = SocketLB()
    except SocketLBUnavailable as e:
        pytest.skip(f"the kernel refused connect-time balancing here: {e.strerror}")
    try:
        yield lb
    finally:
        lb.close()


class Backends:
    """Listeners that answer each connection with their own name, and note the client's address."""

    def __init__(self, hosts: list[str]) -> None:
        self.seen: list[tuple[str, str]] = []
        self.socks = []
        for host in hosts:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, PORT))
            s.listen(64)
            self.socks.append(s)
            threading.Thread(target=self._serve, args=(s, host), daemon=True).start()

    def _serve(self, s: socket.socket, host: str) -> None:
        while True:
            try:
                c, peer = s.accept()
            except OSError:
                return
            self.seen.append((host, peer[0]))
            c.sendall(host.encode())
            c.close()

    def close(self) -> None:
        for s in self.socks:
            s.close()


def ask(addr: tuple[str, int], source: str = "127.0.0.1") -> tuple[str, tuple[str, int]]:
    with socket.create_connection(addr, timeout=3, source_address=(source, 0)) as c:
        return c.recv(100).decode(), c.getpeername()


def test_connects_are_balanced_shrunk_forgotten_and_released(lb: SocketLB) -> None:
    net = random_net()
    hosts = [f"127.206.{net}.{i}" for i in (1, 2, 3)]
    svc = (f"127.207.{net}.10", 8000)
    backends = Backends(hosts)
    try:
        lb.serve(*svc, tuple((h, PORT) for h in hosts))
        answers = [ask(svc, source="127.0.0.4") for _ in range(60)]
        assert {name for name, _ in answers} == set(hosts)  # random over three: one missing is < 1e-10
        assert {peer for _, peer in answers} == {svc}  # getpeername() shows the service address
        assert {client for _, client in backends.seen} == {"127.0.0.4"}  # no relay in between
        assert lb.connections(*svc) == 60

        lb.serve(*svc, ((hosts[2], PORT),))  # shrink: the other two get nothing new
        assert {ask(svc)[0] for _ in range(10)} == {hosts[2]}
        lb.serve(*svc, tuple((h, PORT) for h in hosts[:2]))  # and back, in the same run of slots
        assert {ask(svc)[0] for _ in range(30)} == set(hosts[:2])
        five = (*((h, PORT) for h in hosts), *((h, PORT) for h in hosts[:2]))
        lb.serve(*svc, five)  # beyond its run of four slots: a new run of eight, then the switch
        assert {ask(svc)[0] for _ in range(40)} == set(hosts)
        assert lb.served() == 1 and lb.connections(*svc) == 140

        lb.forget(*svc)  # nothing listens on the address itself
        with pytest.raises(ConnectionRefusedError):
            ask(svc)
        lb.serve(*svc, ((hosts[0], PORT),))
        assert ask(svc)[0] == hosts[0]
        assert lb.connections(*svc) == 1  # counted afresh once served again
        lb.close()  # the programs detach with their links
        with pytest.raises(ConnectionRefusedError):
            ask(svc)
    finally:
        backends.close()


def test_udp_connects_keep_their_destination(lb: SocketLB) -> None:
    net = random_net()
    host = f"127.206.{net}.1"
    svc = (f"127.207.{net}.10", 8000)
    backends = Backends([host])
    try:
        lb.serve(*svc, ((host, PORT),))
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.connect(svc)  # a connected UDP socket keeps its destination
        assert u.getpeername() == svc
        u.close()
        assert ask(svc)[0] == host
    finally:
        backends.close()
