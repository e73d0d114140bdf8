"""`isthmus kube-lite` as a process: serves /readyz, allocates, stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import sys
from typing import Any

import httpx2
import pytest
from lightkube.resources.core_v1 import Service

pytestmark = pytest.mark.timeout(60)

# The command registers on import; run it the way cli/main.py will once it imports the module.
LAUNCH = "from isthmus.cli import kubelite; from isthmus.cli.main import app; app()"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_kube_lite_process(apiserver: Any) -> None:
    a = random.randint(100, 199)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCH, "kube-lite",
        "--kubeconfig", apiserver.kubeconfig, "--cluster-name", "c9",
        "--pod-cidr", f"127.{a}.7.0/24", "--service-cidr", f"127.{a}.8.0/24",
        "--node-port-range", "30000-30010", "--metrics-addr", f"127.0.0.1:{port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with httpx2.AsyncClient(trust_env=False) as http:
            async with asyncio.timeout(30):
                while True:
                    try:
                        r = await http.get(f"http://127.0.0.1:{port}/readyz")
                        if r.status_code == 200:
                            break
                    except httpx2.TransportError:
                        pass
                    await asyncio.sleep(0.2)
        client = apiserver.client()
        await client.create(
            Service.from_dict(
                {"metadata": {"name": "s", "namespace": "default"}, "spec": {"ports": [{"port": 80}]}}
            )
        )
        async with asyncio.timeout(15):
            while True:
                svc = await client.get(Service, "s", namespace="default")
                if svc.spec and svc.spec.clusterIP:
                    break
                await asyncio.sleep(0.1)
        assert svc.spec.clusterIP.startswith(f"127.{a}.8.")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
