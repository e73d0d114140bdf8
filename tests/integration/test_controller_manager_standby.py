"""Two `isthmus controller-manager` replicas, as deploy/member runs them: both ready (the standby is
healthy: the apiserver answers its election), one leads each controller and the other says it does not
(`isthmus_leader_is_leader` 0), and at SIGTERM the leader hands its Leases back so the standby takes
them over without waiting for them to expire."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from lightkube import ApiError
from lightkube.resources.coordination_v1 import Lease

from isthmus.kube.client import client_for, load_config
from isthmus.kube.tokens import request_token
from tests.harness.apiserver import RunningApiServer
from tests.harness.polling import eventually
from tests.harness.ports import free_port
from tests.integration.test_controller_manager import (  # noqa: F401 (the installed fixture)
    NS,
    ROOT,
    installed,
    kubeconfig_as,
    status_of,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

LEASES = ("isthmus-lb", "isthmus-egress-operator")


@contextlib.asynccontextmanager
async def replica(kubeconfig: Path, identity: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, Path]]:
    port = free_port()
    log = kubeconfig.parent / f"{identity}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "POD_NAMESPACE": NS}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "isthmus", "controller-manager", "--kubeconfig", str(kubeconfig),
            "--metrics-addr", f"127.0.0.1:{port}", "--identity", identity, "--controllers=*,-mcsvc",
            "--use-service-account-credentials", "--cluster-name", "c1",
            stdout=out, stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        yield proc, f"http://127.0.0.1:{port}", log
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def leading(base: str) -> dict[str, float]:
    """`isthmus_leader_is_leader` per Lease, as the replica's /metrics says."""
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics", timeout=aiohttp.ClientTimeout(total=2)) as r:
        text = await r.text()
    return {m[1]: float(m[2]) for m in re.finditer(r'^isthmus_leader_is_leader\{lease="[^/"]+/([^"]+)"\} (\S+)$',
                                                   text, re.M)}


async def test_both_replicas_are_ready_one_leads_and_sigterm_hands_the_leases_to_the_standby(
        installed: RunningApiServer, tmp_path: Path) -> None:  # noqa: F811
    config = load_config(installed.kubeconfig)
    admin = client_for(config)

    async def holders() -> list[str | None]:
        out: list[str | None] = []
        for name in LEASES:
            try:
                spec = (await admin.get(Lease, name, namespace=NS)).spec
                out.append(spec.holderIdentity if spec is not None else None)
            except ApiError:
                out.append(None)
        return out

    async def ready(base: str) -> bool:
        return await status_of(base + "/readyz") == 200

    try:
        token, _ = await request_token(admin, NS, "isthmus-controller-manager")
        kubeconfig = kubeconfig_as(installed, token, tmp_path / "manager.yaml")
        async with replica(kubeconfig, "manager-0") as (first, first_url, first_log), \
                replica(kubeconfig, "manager-1") as (second, second_url, second_log):
            await eventually(lambda: ready(first_url), within=60, what=f"manager-0 ready ({first_log.read_text()[-2000:]})")
            await eventually(lambda: ready(second_url), within=60, what=f"manager-1 ready ({second_log.read_text()[-2000:]})")
            # Each controller has one leader; which replica won each Lease is the race's.
            now = await holders()
            assert set(now) <= {"manager-0", "manager-1"} and None not in now, now
            by_url = {"manager-0": first_url, "manager-1": second_url}
            for name, holder in zip(LEASES, now, strict=True):
                assert holder is not None
                other = "manager-1" if holder == "manager-0" else "manager-0"
                assert (await leading(by_url[holder]))[name] == 1.0
                assert (await leading(by_url[other]))[name] == 0.0  # the standby does not claim it
            assert await ready(first_url) and await ready(second_url)  # still both ready after the metrics

            # Stop whichever replica leads the egress operator; the other takes every Lease it held.
            leader = now[1]
            assert leader is not None
            proc, survivor = (first, "manager-1") if leader == "manager-0" else (second, "manager-0")
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)

            async def taken() -> bool:
                return await holders() == [survivor, survivor]

            await eventually(taken, within=30, what="the survivor holds both Leases")
            handover = time.monotonic() - t0
            assert await asyncio.wait_for(proc.wait(), 15) == 0
            log = (first_log if leader == "manager-0" else second_log).read_text()
            assert log.count("lease released") >= 1, log[-2000:]  # handed back, not left to expire
            await eventually(lambda: ready(by_url[survivor]), within=30, what="the survivor ready as the leader")
            assert await leading(by_url[survivor]) == dict.fromkeys(LEASES, 1.0)
            print(f"handover after SIGTERM: {handover:.2f} s")
    finally:
        await admin.close()
