"""`isthmus dns` at SIGTERM: the lame-duck period (CoreDNS's `health { lameduck }`). Proxies that have not
yet seen the endpoint go keep sending queries; the server turns not-ready at once but answers them for
--shutdown-delay, then exits cleanly. One process and the --workers parent (which tells its workers)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from typing import Any

import aiohttp
import dns.asyncquery
import dns.exception
import dns.message
import pytest

from isthmus.kube.helpers import install_crds
from tests.harness.ports import free_port

pytestmark = pytest.mark.timeout(90)

NAME = "dns-version.clusterset.local"
DELAY = 4.0
"""The test's --shutdown-delay; the queries below stop 1 s before it ends."""


async def answered(port: int) -> bool:
    try:
        r = await dns.asyncquery.udp(dns.message.make_query(NAME, "TXT"), "127.0.0.1", port=port, timeout=1)
    except (dns.exception.Timeout, OSError):
        return False
    return bool(r.answer)


async def readyz(http: aiohttp.ClientSession, mport: int) -> int:
    try:
        async with http.get(f"http://127.0.0.1:{mport}/readyz") as r:
            return r.status
    except aiohttp.ClientError:
        return 0


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_sigterm_turns_not_ready_and_keeps_answering_for_the_delay(apiserver: Any, workers: str) -> None:
    client = apiserver.client()
    async with asyncio.timeout(20):
        await install_crds(client)
    port, mport = free_port(udp=True), free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "dns", "--kubeconfig", apiserver.kubeconfig, "--cluster-id", "c1",
        "--listen", f"127.0.0.1:{port}", "--workers", workers, "--metrics-addr", f"127.0.0.1:{mport}",
        "--shutdown-delay", str(DELAY), "--log-level", "info",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):  # bounded: 20 s
                if await readyz(http, mport) == 200 and await answered(port):
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the DNS server never became ready")
            proc.send_signal(signal.SIGTERM)
            first_status = 200
            for _ in range(20):  # bounded: the signal's handler runs within a moment, not within our next request
                first_status = await readyz(http, mport)
                if first_status == 503:
                    break
                await asyncio.sleep(0.05)
            ok = failed = 0
            statuses: set[int] = set()
            end = time.monotonic() + DELAY - 1.0
            while time.monotonic() < end:  # what a proxy that has not seen the change yet sends
                if await answered(port):
                    ok += 1
                else:
                    failed += 1
                statuses.add(await readyz(http, mport))
            assert first_status == 503  # not ready within a second: the endpoints controller drops the server
            assert statuses == {503}
            assert failed == 0 and ok > 10, (ok, failed)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(proc.communicate(), 30)
        print(output.decode())
    assert proc.returncode == 0
    assert "still serving for the shutdown delay" in output.decode()
