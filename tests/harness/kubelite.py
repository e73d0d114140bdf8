"""kube-lite in this event loop for tests (`Lite`: echo pods, no process pods), and helpers for the
objects and requests the kube-lite tests make (moved from tests/integration/test_kubelite.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from isthmus.local.kubelite import WORKLOAD_ANNOTATION, KubeLite
from isthmus.local.kubelite.processes import ProcessOptions

NS = "default"
NODE_PORTS = (30000, 30099)


def _cidrs() -> tuple[str, str]:
    a, b = random.randint(100, 199), random.randint(0, 255)
    return f"127.{a}.{b}.0/24", f"127.{a + 100 if a < 155 else a - 50}.{b}.0/24"


class Lite:
    """A running KubeLite in a task; restartable on the same CIDRs."""

    stop_timeout = 15.0

    def __init__(self, client: AsyncClient, cluster: str = "c1", processes: ProcessOptions | None = None) -> None:
        self.client = client
        self.cluster = cluster
        self.processes = processes
        self.pod_cidr, self.service_cidr = _cidrs()
        self.task: asyncio.Task[None] | None = None
        self.lite: KubeLite | None = None

    async def start(self) -> None:
        self.lite = KubeLite(
            self.client,
            cluster=self.cluster,
            pod_cidr=self.pod_cidr,
            service_cidr=self.service_cidr,
            node_ports=NODE_PORTS,
            processes=self.processes,
        )
        ready = asyncio.Event()
        self.task = asyncio.create_task(self.lite.run(ready))
        async with asyncio.timeout(15):
            await ready.wait()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                async with asyncio.timeout(self.stop_timeout):
                    await self.task
            self.task = None


async def create(client: AsyncClient, res: Any, body: dict[str, Any]) -> None:
    body.setdefault("metadata", {}).setdefault("namespace", NS)
    await client.create(res.from_dict(body))


async def pods_of(client: AsyncClient, labels: dict[str, str]) -> list[dict[str, Any]]:
    return [p.to_dict() async for p in client.list(Pod, namespace=NS, labels=labels)]


async def http_twice(ip: str, port: int) -> list[dict[str, Any]]:
    """Two requests on one kept-alive HTTP/1.1 connection; the decoded JSON answers."""
    reader, writer = await asyncio.open_connection(ip, port)
    out = []
    try:
        for path in ("/first?x=1", "/second"):
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: echo\r\nX-Test: yes\r\nContent-Length: 4\r\n\r\nping".encode()
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            out.append(json.loads(await reader.readexactly(length)))
        host, port_ = writer.get_extra_info("sockname")[:2]
        out.append({"local": f"{host}:{port_}"})
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return out


def echo_deployment(name: str, replicas: int, version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {WORKLOAD_ANNOTATION: "echo", "v": version},
                },
                "spec": {
                    "containers": [
                        {
                            "name": "echo",
                            "image": f"echo:{version}",
                            "ports": [
                                {"name": "http", "containerPort": 8080},
                                {"name": "dns", "containerPort": 5353, "protocol": "UDP"},
                            ],
                        }
                    ]
                },
            },
        },
    }


async def kubectl(kubeconfig: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        kubeconfig,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(60):
        out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()
