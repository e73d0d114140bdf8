"""Proxy benchmark: small HTTP requests through `isthmus proxy` (ClusterIP and VIP) vs straight to the backend.

    .venv/bin/python bench/proxy.py [--requests 20000] [--new-conn-requests 4000] [--concurrency 8]

1. A fast backend (child process: a bare asyncio Protocol answering every GET with a fixed 2-byte
   body) listens on 127.210.0.1:18080.
2. An embedded apiserver (child) gets a Service with ClusterIP 127.211.0.10:8000, its EndpointSlice
   pointing at the backend, and a ServiceImport with VIP 127.212.0.5:8000 exported by this cluster.
3. `isthmus proxy --cluster-id c1` (child, the real CLI) makes both reachable.
4. The client (this process; asyncio, `--concurrency` connections) sends a bounded number of
   requests to each target, in two variants: keep-alive (requests back to back on open
   connections) and new connection per request (`Connection: close`). Reported: requests/s, p50
   and p99 latency, and the proxy/direct ratios.

Only processes this script started are stopped, by PID. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
NS = "bench"
BACKEND = ("127.210.0.1", 18080)
CLUSTER_IP = ("127.211.0.10", 8000)
VIP = ("127.212.0.5", 8000)
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
CLOSE_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
)
REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: isthmus-bench\r\n\r\n"
CLOSE_REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: isthmus-bench\r\nConnection: close\r\n\r\n"


# --- child: the backend ---------------------------------------------------------------------------


class _Http(asyncio.Protocol):
    """Answers every complete request head; closes after one that asked to."""

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head, self.buf = self.buf[:end], self.buf[end + 4 :]
            if b"Connection: close" in head:
                self.transport.write(CLOSE_RESPONSE)
                self.transport.close()
                return
            self.transport.write(RESPONSE)


async def run_backend() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Http, *BACKEND, reuse_address=True, backlog=4096)
    print("READY", flush=True)
    async with server:
        await asyncio.Event().wait()


# --- child: the cluster (apiserver + objects) ------------------------------------------------------


async def run_cluster(state: Path) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Namespace, Service
    from lightkube.resources.discovery_v1 import EndpointSlice
    from lightkube.types import PatchType

    from isthmus.api.mcs import KUBE_SERVICE_NAME_LABEL, ServiceImport
    from isthmus.apiserver.server import ApiServer
    from isthmus.kube.helpers import install_crds
    from isthmus.kube.resources import resource_for

    server = ApiServer(data_dir=state / "apiserver")
    await server.start()
    kubeconfig = state / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    await install_crds(client)
    await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
    port = {"name": "http", "port": CLUSTER_IP[1], "targetPort": BACKEND[1], "protocol": "TCP"}
    await client.create(
        Service.from_dict(
            {
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"clusterIP": CLUSTER_IP[0], "clusterIPs": [CLUSTER_IP[0]], "ports": [port]},
            }
        )
    )
    await client.create(
        EndpointSlice.from_dict(
            {
                "metadata": {"name": "web-x", "namespace": NS, "labels": {KUBE_SERVICE_NAME_LABEL: "web"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [BACKEND[0]], "conditions": {"ready": True}}],
                "ports": [{"name": "http", "port": BACKEND[1], "protocol": "TCP"}],
            }
        )
    )
    si = resource_for(ServiceImport)
    await client.create(
        si.from_dict(
            {
                "apiVersion": "multicluster.x-k8s.io/v1alpha1",
                "kind": "ServiceImport",
                "metadata": {"name": "web", "namespace": NS},
                "spec": {
                    "type": "ClusterSetIP",
                    "ips": [VIP[0]],
                    "ports": [{"name": "http", "port": VIP[1], "protocol": "TCP"}],
                },
            }
        )
    )
    await client.patch(
        si.Status,
        "web",
        {"status": {"clusters": [{"cluster": "c1"}]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )
    print("READY", flush=True)
    await asyncio.Event().wait()


# --- the client -----------------------------------------------------------------------------------


class _KeepAlive(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.got = 0
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= len(RESPONSE) and self.waiter is not None and not self.waiter.done():
            self.got -= len(RESPONSE)
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("closed"))

    async def request(self) -> None:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(REQUEST)
        await self.waiter


async def keep_alive(addr: tuple[str, int], n: int, concurrency: int) -> list[int]:
    loop = asyncio.get_running_loop()
    latencies: list[int] = []
    left = n

    async def worker() -> None:
        nonlocal left
        transport, proto = await loop.create_connection(_KeepAlive, *addr)
        try:
            while left > 0:
                left -= 1
                t0 = time.perf_counter_ns()
                await proto.request()
                latencies.append(time.perf_counter_ns() - t0)
        finally:
            transport.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def new_connections(addr: tuple[str, int], n: int, concurrency: int) -> list[int]:
    latencies: list[int] = []
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter_ns()
            reader, writer = await asyncio.open_connection(*addr)
            writer.write(CLOSE_REQUEST)
            body = await reader.read()
            writer.close()
            if not body.endswith(b"ok"):
                raise RuntimeError(f"bad answer {body!r}")
            latencies.append(time.perf_counter_ns() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def measure(kind: str, addr: tuple[str, int], n: int, concurrency: int) -> dict[str, float]:
    run = keep_alive if kind == "keep-alive" else new_connections
    await run(addr, max(200, n // 10), concurrency)  # warm-up
    t0 = time.perf_counter()
    lat = await run(addr, n, concurrency)
    elapsed = time.perf_counter() - t0
    lat.sort()
    return {
        "rps": len(lat) / elapsed,
        "p50": lat[len(lat) // 2] / 1e6,
        "p99": lat[int(len(lat) * 0.99)] / 1e6,
        "mean": statistics.fmean(lat) / 1e6,
    }


async def wait_http(addr: tuple[str, int], timeout: float = 30) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while True:
        try:
            await new_connections(addr, 1, 1)
            return
        except (OSError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


# --- orchestration --------------------------------------------------------------------------------


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_ready(p: subprocess.Popen[str], what: str) -> None:
    assert p.stdout is not None
    line = p.stdout.readline()
    if line.strip() != "READY":
        err = p.stderr.read() if p.stderr else ""
        raise SystemExit(f"{what} failed to start: {line}{err}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20000, help="keep-alive requests per target")
    ap.add_argument("--new-conn-requests", type=int, default=4000, help="new-connection requests per target")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--role", choices=["backend", "cluster"], help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "backend":
        asyncio.run(run_backend())
        return
    if a.role == "cluster":
        asyncio.run(run_cluster(Path(a.state)))
        return

    procs: list[subprocess.Popen[str]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-proxy-") as tmp:
        try:
            backend = spawn([PY, __file__, "--role", "backend"], env)
            procs.append(backend)
            wait_ready(backend, "backend")
            cluster = spawn([PY, __file__, "--role", "cluster", "--state", tmp], env)
            procs.append(cluster)
            wait_ready(cluster, "apiserver")
            cli = "import isthmus.cli.main, isthmus.cli.proxy; from isthmus.cli.app import app; app(prog_name='isthmus')"
            proxy = spawn(
                [PY, "-c", cli, "proxy", "--kubeconfig", f"{tmp}/kubeconfig", "--cluster-id", "c1",
                 "--log-level", "warning"],
                env,
            )  # fmt: skip
            procs.append(proxy)
            asyncio.run(_bench(a))
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()


async def _bench(a: Any) -> None:
    await wait_http(CLUSTER_IP)
    await wait_http(VIP)
    targets = {"direct": BACKEND, "ClusterIP": CLUSTER_IP, "VIP": VIP}
    print(
        f"isthmus proxy benchmark: {os.cpu_count()} CPUs, concurrency {a.concurrency}, "
        f"{a.requests} keep-alive / {a.new_conn_requests} new-connection requests per target"
    )
    for kind, n in (("keep-alive", a.requests), ("new-conn", a.new_conn_requests)):
        results = {name: await measure(kind, addr, n, a.concurrency) for name, addr in targets.items()}
        base = results["direct"]
        print(f"\n{kind}:")
        print(
            f"  {'target':<10} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'req/s vs direct':>16} {'p99 vs direct':>14}"
        )
        for name, r in results.items():
            print(
                f"  {name:<10} {r['rps']:>9.0f} {r['p50']:>8.3f} {r['p99']:>8.3f} "
                f"{r['rps'] / base['rps']:>16.2f} {r['p99'] / base['p99']:>14.2f}"
            )


if __name__ == "__main__":
    main()
