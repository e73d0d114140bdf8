"""`isthmus dns` without --cluster-id, as the member manifest runs it: before `isthmus join` it waits
(and stops cleanly on SIGTERM); once the cluster has joined it serves."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from isthmus.clusterset import membership
from tests.harness.clusterset import ClusterSet
from tests.harness.ports import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(90)]

ISTHMUS = str(Path(sys.executable).with_name("isthmus"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("dns-cli"), n=1, start_agents=False) as cs:
        yield cs


def _query(port: int) -> bytes | None:
    """One A query for a name in the zone; the raw answer, or None without one."""
    qname = b"".join(bytes([len(p)]) + p for p in b"web.shop.svc.clusterset.local".split(b".")) + b"\0"
    packet = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        s.sendto(packet, ("127.0.0.1", port))
        try:
            return s.recv(4096)
        except OSError:
            return None


def _start(kubeconfig: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([ISTHMUS, "dns", "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{port}"],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=dict(os.environ))


async def test_dns_waits_for_join_then_serves(cs: ClusterSet, tmp_path: Path) -> None:
    srv, client = await cs.spare_server("late")
    port, log = free_port(udp=True), tmp_path / "dns.log"
    early = _start(srv.kubeconfig, port, log)
    try:
        for _ in range(100):  # a loaded machine may take seconds to start Python
            if "has not joined a clusterset yet" in log.read_text() or early.poll() is not None:
                break
            await asyncio.sleep(0.2)
        assert early.poll() is None, log.read_text()
        assert "has not joined a clusterset yet" in log.read_text()
        assert _query(port) is None  # not serving before join
    finally:
        early.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert early.wait(timeout=10) == 0 and time.monotonic() - started < 5, log.read_text()

    proc = _start(srv.kubeconfig, port, log)
    try:
        await membership.join(cs.broker_client, client, cs.info, cluster_id="late", enable_clusterset_ip=None,
                              clusterset_ip_cidr=None, force=False, member_credentials=cs.member_credentials)
        deadline = time.monotonic() + 20
        answer = None
        while time.monotonic() < deadline and answer is None:
            assert proc.poll() is None, log.read_text()
            answer = await asyncio.to_thread(_query, port)
        assert answer is not None and answer[:2] == b"\x12\x34", log.read_text()
        assert "cluster joined as late: serving" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
