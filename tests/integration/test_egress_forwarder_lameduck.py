"""`isthmus egress-forwarder` at SIGTERM: a lame duck, as DNS and the pool manager have. A forwarder pod
being drained or rolled is marked terminating at once, but the operator's published EndpointSlice and
then every node's proxy follow a moment later and still send it new connections meanwhile: it turns
not-ready at once and keeps accepting and relaying them for --shutdown-delay, then exits cleanly.

The process is the real command; its Forwarder object is written here as the operator writes it, and
a stand-in gateway answers the relay header and echoes."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import socket
import sys
import time
from typing import Any

import aiohttp
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace

from isthmus.api.egress import Forwarder
from isthmus.kube.helpers import install_crds
from isthmus.kube.resources import resource_for
from tests.harness.ports import free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]

NS = "isthmus-system"
NAME = "default.pg"
PORT = 7000
DELAY = 4.0
"""The test's --shutdown-delay; the connections below stop 1 s before it ends."""


async def echoed(src: str, ip: str) -> bool:
    """A new connection from `src` through the forwarder gets its line back (from the gateway's echo)."""
    s = socket.socket()
    s.setblocking(False)
    try:
        s.bind((src, 0))
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(s, (ip, PORT)), 1)
        r, w = await asyncio.open_connection(sock=s)
    except (OSError, TimeoutError):
        s.close()
        return False
    try:
        w.write(b"ping\n")
        return await asyncio.wait_for(r.readline(), 2) == b"ping\n"
    except (OSError, TimeoutError):
        return False
    finally:
        w.close()


async def readyz(http: aiohttp.ClientSession, mport: int) -> int:
    try:
        async with http.get(f"http://127.0.0.1:{mport}/readyz") as r:
            return r.status
    except aiohttp.ClientError:
        return 0


async def test_sigterm_turns_not_ready_and_keeps_relaying_for_the_delay(apiserver: Any) -> None:
    base = f"127.79.{random.randint(1, 250)}"
    forwarder_ip, gateway_ip, source = f"{base}.2", f"{base}.3", f"{base}.10"
    client = apiserver.client()
    async with asyncio.timeout(30):
        await install_crds(client)
        await client.create(Namespace(metadata=ObjectMeta(name=NS)))

    async def gateway(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await r.readuntil(b"\n")  # the relay header
            w.write(b"OK\n")
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        w.close()

    gport, mport = free_port(host=gateway_ip), free_port()
    server = await asyncio.start_server(gateway, gateway_ip, gport)
    await client.apply(resource_for(Forwarder).from_dict({
        "apiVersion": "egress.isthmus.io/v1alpha1", "kind": "Forwarder", "metadata": {"name": NAME, "namespace": NS},
        "spec": {"egressRules": [{"protocol": "TCP", "sourceIP": f"{base}.100", "targetPort": PORT,
                                  "destinationIP": f"{base}.50", "destinationPort": PORT, "clientIPs": [source],
                                  "gateway": {"namespace": NS, "name": NAME}}],
                 "gatewayAddress": f"{gateway_ip}:{gport}", "gatewayIPs": [gateway_ip], "ingressRules": []}}),
        field_manager="test", force=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "isthmus", "egress-forwarder", "--forwarder", NAME, "--namespace", NS,
        "--listen", forwarder_ip, "--kubeconfig", apiserver.kubeconfig, "--metrics-addr", f"127.0.0.1:{mport}",
        "--shutdown-delay", str(DELAY), "--log-level", "info",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):  # bounded: 30 s
                if await readyz(http, mport) == 200 and await echoed(source, forwarder_ip):
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the forwarder never became ready")
            proc.send_signal(signal.SIGTERM)
            first_status = 200
            for _ in range(20):  # bounded: the signal's handler runs within a moment
                first_status = await readyz(http, mport)
                if first_status == 503:
                    break
                await asyncio.sleep(0.05)
            ok = failed = 0
            statuses: set[int] = set()
            end = time.monotonic() + DELAY - 1.0
            while time.monotonic() < end:  # what a proxy that has not seen the change yet sends
                if await echoed(source, forwarder_ip):
                    ok += 1
                else:
                    failed += 1
                statuses.add(await readyz(http, mport))
            assert first_status == 503  # not ready at once: the endpoints controller and the operator drop it
            assert statuses == {503}
            assert failed == 0 and ok > 5, (ok, failed)
        output, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, output.decode()
        assert "still serving for the shutdown delay" in output.decode()
        assert not await echoed(source, forwarder_ip)  # then it is gone
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        server.close()
        await client.close()
