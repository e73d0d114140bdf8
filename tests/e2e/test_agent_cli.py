"""`isthmus agent` as a user runs it: a restart after kill -9 takes its own lease back at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import httpx2 as httpx
import pytest
import pytest_asyncio
from lightkube.resources.coordination_v1 import Lease

from isthmus.api.mcs import AGENT_LEASE_NAME, AGENT_NAMESPACE
from tests.harness.clusterset import ClusterSet
from tests.harness.ports import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(90)]

ISTHMUS = str(Path(sys.executable).with_name("isthmus"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ClusterSet]:
    async with ClusterSet(tmp_path_factory.mktemp("agent-cli"), n=1, start_agents=False) as cs:
        yield cs


def _start(cs: ClusterSet, port: int, log: Path) -> subprocess.Popen[bytes]:
    m = cs.clusters[0]
    return subprocess.Popen(
        [ISTHMUS, "agent", "--cluster-id", m.id, "--kubeconfig", m.server.kubeconfig,
         "--metrics-addr", f"127.0.0.1:{port}"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "POD_NAME": "agent-pod-0"},
    )


async def _ready(port: int, proc: subprocess.Popen[bytes], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(trust_env=False) as http:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"agent exited with {proc.returncode}"
            try:
                if (await http.get(f"http://127.0.0.1:{port}/readyz", timeout=1.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("agent not ready")


async def test_an_agent_restarted_after_kill_9_takes_its_own_lease_back_at_once(
    cs: ClusterSet, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "agent.log"
    first = _start(cs, port, log)
    try:
        await _ready(port, first)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    lease = await cs.c(0).get(Lease, AGENT_LEASE_NAME, namespace=AGENT_NAMESPACE)
    assert lease.spec.holderIdentity == "agent-pod-0"  # the pod name, stable across restarts
    renewed = lease.spec.renewTime
    expires = (renewed if isinstance(renewed, datetime) else datetime.fromisoformat(str(renewed))).timestamp() \
        + lease.spec.leaseDurationSeconds
    second = _start(cs, port, log)
    try:
        await _ready(port, second)
        ready_at = time.time()
        after = await cs.c(0).get(Lease, AGENT_LEASE_NAME, namespace=AGENT_NAMESPACE)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=15)
    # It did not wait out the dead process's lease: it was its own.
    assert ready_at < expires, f"ready {ready_at - expires:.1f} s after the old lease expired"
    assert after.spec.holderIdentity == "agent-pod-0"
    assert after.spec.leaseTransitions == lease.spec.leaseTransitions


async def test_an_agent_without_cluster_id_waits_for_join_then_runs_as_the_joined_cluster(
    cs: ClusterSet, tmp_path: Path
) -> None:
    """One member manifest fits every cluster: no --cluster-id; before join the agent waits, not ready."""
    from isthmus.clusterset import membership

    srv, client = await cs.spare_server("late")
    port, log = free_port(), tmp_path / "late.log"
    proc = _start_unjoined(srv.kubeconfig, port, log)
    try:
        async with httpx.AsyncClient(trust_env=False) as http:
            deadline = time.monotonic() + 3.0
            seen_unready = False
            while time.monotonic() < deadline:
                assert proc.poll() is None, f"agent exited with {proc.returncode}: {log.read_text()}"
                try:
                    seen_unready |= (await http.get(f"http://127.0.0.1:{port}/readyz", timeout=1.0)).status_code != 200
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        assert seen_unready
        assert "has not joined a clusterset" in log.read_text()
        await membership.join(cs.broker_client, client, cs.info, cluster_id="late", enable_clusterset_ip=None,
                              clusterset_ip_cidr=None, force=False, member_credentials=cs.member_credentials)
        await _ready(port, proc, within=30.0)
        lease = await client.get(Lease, AGENT_LEASE_NAME, namespace=AGENT_NAMESPACE)
        assert lease.spec.holderIdentity == "late-0"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def _start_unjoined(kubeconfig: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [ISTHMUS, "agent", "--kubeconfig", kubeconfig, "--metrics-addr", f"127.0.0.1:{port}"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "POD_NAME": "late-0"},
    )
