"""Two real OS processes elect a leader on one Lease of the embedded apiserver."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

import pytest
from lightkube.resources.coordination_v1 import Lease

from tests.harness.polling import eventually

pytestmark = pytest.mark.timeout(90)

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5

CANDIDATE = """
import asyncio, os, signal, sys
from lightkube import AsyncClient, KubeConfig
from isthmus.runtime import LeaderElector

async def main() -> None:
    kubeconfig, ident = sys.argv[1], sys.argv[2]
    lease, renew, retry = (float(a) for a in sys.argv[3:6])
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    elector = LeaderElector(client, "test-lock", "default", identity=ident,
                            lease_duration=lease, renew_deadline=renew, retry_period=retry)

    async def lead() -> None:
        print("LEADING", ident, os.getpid(), flush=True)
        await asyncio.Event().wait()

    async def stopped() -> None:
        print("STOPPED", ident, flush=True)

    task = asyncio.current_task()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        await elector.run(lead, stopped)
    except asyncio.CancelledError:
        print("EXITING", ident, flush=True)

asyncio.run(main())
"""


class Candidate:
    def __init__(self, proc: asyncio.subprocess.Process, ident: str) -> None:
        self.proc = proc
        self.ident = ident
        self.lines: list[tuple[float, str]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), raw.decode().strip()))

    def saw(self, word: str) -> float | None:
        for t, line in self.lines:
            if line.startswith(word):
                return t
        return None


async def spawn(kubeconfig: str, ident: str) -> Candidate:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CANDIDATE,
        kubeconfig,
        ident,
        str(LEASE),
        str(RENEW),
        str(RETRY),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return Candidate(proc, ident)


async def test_two_processes_one_leader_and_takeover(apiserver: Any) -> None:
    client = apiserver.client()
    cands = [await spawn(apiserver.kubeconfig, "alpha"), await spawn(apiserver.kubeconfig, "beta")]
    try:
        await eventually(lambda: any(c.saw("LEADING") for c in cands), within=20)
        await asyncio.sleep(LEASE + 1)  # several renewals: still exactly one leader
        leaders = [c for c in cands if c.saw("LEADING")]
        assert len(leaders) == 1
        leader = leaders[0]
        follower = next(c for c in cands if c is not leader)
        lease = await client.get(Lease, "test-lock", namespace="default")
        assert lease.spec.holderIdentity == leader.ident

        killed_at = time.monotonic()
        os.kill(leader.proc.pid, signal.SIGKILL)  # a process this test started
        await leader.proc.wait()
        await eventually(lambda: follower.saw("LEADING") is not None, within=LEASE + 5)
        takeover = follower.saw("LEADING") - killed_at  # type: ignore[operator]
        print(f"takeover after SIGKILL of the leader: {takeover:.2f}s")
        # The follower last saw the record change at most ~one retry period before the kill; it waits
        # the lease duration from then, and tries every retry period (+20% jitter).
        assert takeover <= LEASE + 2 * RETRY * 1.2
        lease = await client.get(Lease, "test-lock", namespace="default")
        assert lease.spec.holderIdentity == follower.ident
        assert lease.spec.leaseTransitions >= 1

        # A clean shutdown releases the lease: a newcomer takes over without waiting for expiry.
        newcomer = await spawn(apiserver.kubeconfig, "gamma")
        cands.append(newcomer)
        await asyncio.sleep(1.5)
        assert newcomer.saw("LEADING") is None
        # Every version of the Lease from now on: the release must show in it (not judged by timing,
        # which a loaded machine stretches).
        seen: list[tuple[str | None, int | None]] = []

        async def record() -> None:
            async for _, obj in client.watch(Lease, namespace="default", fields={"metadata.name": "test-lock"}):
                seen.append((obj.spec.holderIdentity, obj.spec.leaseDurationSeconds))

        watcher = asyncio.create_task(record())
        await asyncio.sleep(0.3)
        stopped_at = time.monotonic()
        follower.proc.send_signal(signal.SIGTERM)
        await eventually(lambda: newcomer.saw("LEADING") is not None, within=LEASE + 5)
        handover = newcomer.saw("LEADING") - stopped_at  # type: ignore[operator]
        print(f"handover after SIGTERM (lease released): {handover:.2f}s")
        await eventually(lambda: bool(seen) and seen[-1][0] == newcomer.ident, within=5)
        watcher.cancel()
        released = [i for i, (holder, duration) in enumerate(seen) if not holder and duration == 1]
        assert released, seen  # the stopping leader gave the lease up (holder cleared, 1 s duration)
        assert seen[-1][0] == newcomer.ident
        await asyncio.wait_for(follower.proc.wait(), 10)
        assert follower.saw("STOPPED") and follower.saw("EXITING")
    finally:
        for c in cands:
            if c.proc.returncode is None:
                c.proc.kill()
                await c.proc.wait()
            c.reader.cancel()
