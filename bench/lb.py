"""Load-balancing benchmark: HTTP through a real HAProxy pool vs straight to the backend, reloads
and endpoint changes under load, Ingress edit → serving, and translation time.

    .venv/bin/python bench/lb.py [--requests 20000] [--concurrency 8] [--reloads 100]
                                 [--endpoint-changes 1000] [--edits 20] [--rules 1000]

1. Backends (child process: a bare asyncio Protocol answering every GET with a fixed 2-byte body)
   listen on 127.0.0.1 at three ports of the NodePort range: they stand for a node's NodePorts.
2. An embedded apiserver (child) with the CRDs, a Node (InternalIP 127.0.0.1), namespace `bench`
   and a NodePort Service `web` whose nodePort is the first backend's port.
3. `isthmus pools` (child, the real CLI) on 127.30.250.1 / 127.31.250.1 runs pools as HAProxy;
   `isthmus lb --cluster-name bench` (child, the real CLI) translates the Ingress of part 4.
4. Figures, same client for every target (this process; asyncio, `--concurrency` connections):
   - keep-alive req/s, p50, p99: a pool (HTTP frontend → one server) vs the backend directly;
   - failed requests while the pool is reloaded `--reloads` times (spec changes that need a
     reload) under continuous keep-alive load, and the reloads HAProxy's master counted;
   - `--endpoint-changes` server changes (a backend's servers moved between the backend ports)
     under load: reloads counted (target 0: the runtime API applies them) and failures;
   - an Ingress of class edgelb edited `--edits` times, each adding a path: time until the new
     path answers 200 through the pool (p50, p99);
   - translation time of one Ingress with `--rules` rules (the translator's pure function).

Only processes this script started are stopped, by PID. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Bench scripts share the proxy benchmark's backend and client.
from proxy import (
    _Http,
    measure,
)

ROOT = Path(__file__).resolve().parent.parent


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A child whose first line says READY; its stderr goes to a file (a full pipe would stall it)."""
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=tempfile.TemporaryFile(), text=True, env=env)


def wait_ready(p: subprocess.Popen[str], what: str) -> None:
    assert p.stdout is not None
    line = p.stdout.readline()
    if line.strip() != "READY":
        raise SystemExit(f"{what} failed to start: {line!r} (exit {p.poll()})")
PY = sys.executable
NS = "bench"
CLUSTER = "bench"
BACKEND_PORTS = (32101, 32102, 32103)
PUBLIC, PRIVATE = "127.30.250.1", "127.31.250.1"
POOL = "bench-pool"
POOL_PORT = 18600
INGRESS_PORT = 18601
TCP_PORT = 18602
ECHO_FRONTEND_PORT = 18603
ECHO_PORT = 32110
CLI = "from isthmus.cli.main import app; app(prog_name='isthmus')"


# --- children -------------------------------------------------------------------------------------


async def run_backend() -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from isthmus.local.kubelite.echo import EchoIdentity, EchoServer

    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(_Http, "127.0.0.1", p, reuse_address=True, backlog=4096) for p in BACKEND_PORTS]
    # The echo pod: the server kube-lite runs for every `isthmus.io/workload: echo` pod (aiohttp, JSON).
    echo = EchoServer(EchoIdentity("echo-pod", NS, CLUSTER), "127.0.0.1", [(ECHO_PORT, "TCP")])
    await echo.start()
    print("READY", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await echo.stop()
        for s in servers:
            s.close()


async def run_cluster(state: Path) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Namespace, Node, Service
    from lightkube.types import PatchType

    from isthmus.apiserver.server import ApiServer
    from isthmus.kube.helpers import install_crds

    server = ApiServer(data_dir=state / "apiserver")
    await server.start()
    kubeconfig = state / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    await install_crds(client)
    for ns in (NS, "isthmus-system"):
        await client.create(Namespace.from_dict({"metadata": {"name": ns}}))
    await client.create(Node.from_dict({"metadata": {"name": "bench-node"}}))
    await client.patch(Node.Status, "bench-node", {"status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }}, patch_type=PatchType.MERGE)
    await client.create(Service.from_dict({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": BACKEND_PORTS[0]}]},
    }))
    print("READY", flush=True)
    await asyncio.Event().wait()


# --- helpers --------------------------------------------------------------------------------------


def pool_body(servers: list[int], balance: str = "roundrobin", generation_tag: int = 0) -> dict[str, Any]:
    """A LoadBalancerPool written directly (the pool manager's input), one HTTP frontend."""
    return {
        "apiVersion": "isthmus.io/v1alpha1", "kind": "LoadBalancerPool",
        "metadata": {"name": POOL, "annotations": {"bench/tag": str(generation_tag)}},
        "spec": {
            "role": "slave_public",
            "haproxy": {
                "frontends": [{"name": "bench:web", "bindPort": POOL_PORT, "protocol": "HTTP",
                               "linkBackend": {"defaultBackend": "bench:web",
                                               "map": [{"backend": "bench:web", "pathBeg": f"/t{generation_tag}"}]}},
                              {"name": "bench:tcp", "bindPort": TCP_PORT, "protocol": "TCP",
                               "linkBackend": {"defaultBackend": "bench:tcp"}},
                              {"name": "bench:echo", "bindPort": ECHO_FRONTEND_PORT, "protocol": "HTTP",
                               "linkBackend": {"defaultBackend": "bench:echo"}}],
                "backends": [{"name": "bench:web", "protocol": "HTTP", "balance": balance,
                              "servers": [{"address": "127.0.0.1", "port": p} for p in servers]},
                             {"name": "bench:tcp", "protocol": "TCP",
                              "servers": [{"address": "127.0.0.1", "port": BACKEND_PORTS[0]}]},
                             {"name": "bench:echo", "protocol": "HTTP",
                              "servers": [{"address": "127.0.0.1", "port": ECHO_PORT}]}],
            },
        },
    }


def worker_cpu(state: Path, pool: str) -> float:
    """CPU seconds (user + system) HAProxy's current workers of `pool` have used."""
    total = 0.0
    for sock in glob.glob(str(state / "**" / "master.sock"), recursive=True):
        if not Path(sock).parent.name.startswith(pool):
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(sock)
            s.sendall(b"show proc\n")
            s.shutdown(socket.SHUT_WR)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        for line in out.decode().splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[1] == "worker" and fields[0].isdigit():
                with open(f"/proc/{fields[0]}/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
                total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return total


def master_reloads(state: Path, pool: str) -> int:
    """Reloads HAProxy's master counted for a pool (`show proc` on its master socket)."""
    total = 0
    for sock in glob.glob(str(state / "**" / "master.sock"), recursive=True):
        if not Path(sock).parent.name.startswith(pool):
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(sock)
            s.sendall(b"show proc\n")
            s.shutdown(socket.SHUT_WR)  # the master CLI answers, then waits for more unless told there is none
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        for line in out.decode().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[1] == "master":
                total += int(fields[2])
    return total


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    p = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(kubeconfig), *args,
        stdin=subprocess.PIPE if stdin is not None else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    out, err = await p.communicate(stdin.encode() if stdin is not None else None)
    if p.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {err.decode().strip()}")
    return out.decode()


_CLIENTS: dict[str, Any] = {}


async def apply(kubeconfig: Path, body: dict[str, Any]) -> None:
    """Server-side apply through one kept client (a kubectl process per change would measure kubectl)."""
    from lightkube import AsyncClient, KubeConfig
    from lightkube.generic_resource import get_generic_resource

    sys.path.insert(0, str(ROOT / "src"))
    from isthmus.kube.resources import RESOURCES  # noqa: F401  (registers our kinds with lightkube)

    client = _CLIENTS.get(str(kubeconfig))
    if client is None:
        client = _CLIENTS[str(kubeconfig)] = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    if body["kind"] == "Ingress":
        from lightkube.resources.networking_v1 import Ingress

        obj: Any = Ingress.from_dict(body)
    else:
        res = get_generic_resource(body["apiVersion"], body["kind"])
        assert res is not None
        obj = res.from_dict(body)
    await client.apply(obj, field_manager="bench", force=True, namespace=body["metadata"].get("namespace"))


async def wait_pool(kubeconfig: Path, timeout: float = 30) -> dict[str, Any]:  # noqa: ASYNC109
    """Until the pool's status has caught up with its spec (observedGeneration) and is Ready."""
    deadline = time.monotonic() + timeout
    while True:
        obj = json.loads(await kubectl(kubeconfig, "get", "loadbalancerpool", POOL, "-o", "json"))
        st = obj.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
        insts = st.get("instances") or []
        if ready and insts and all(i.get("observedGeneration") == obj["metadata"]["generation"] for i in insts
                                   if i.get("state") == "Running"):
            return obj
        if time.monotonic() > deadline:
            raise SystemExit(f"pool {POOL} not ready after {timeout}s: {json.dumps(st)[:400]}")
        await asyncio.sleep(0.05)


async def http_status(addr: tuple[str, int], path: str, host: str) -> int:
    try:
        reader, writer = await asyncio.open_connection(*addr)
    except OSError:
        return 0
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        head = await reader.readline()
        await reader.read()
        parts = head.split()
        return int(parts[1]) if len(parts) >= 2 else 0
    finally:
        writer.close()


class Load:
    """Continuous keep-alive load with a bound, as a well-behaved HTTP/1.1 client does it: a response
    carrying `Connection: close` ends its connection and the next request opens a new one. A request
    that was sent and got no complete response is a failure (what a reload must never cause)."""

    def __init__(self, addr: tuple[str, int], concurrency: int, limit: int) -> None:
        self.addr, self.concurrency, self.limit = addr, concurrency, limit
        self.ok = self.failed = self.reconnects = 0
        self.stopping = False
        self.errors: dict[str, int] = {}

    async def _worker(self) -> None:
        reader = writer = None
        while not self.stopping and self.ok + self.failed < self.limit:
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(*self.addr)
                assert reader is not None
                writer.write(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                close = False
                for line in head.lower().split(b"\r\n")[1:]:
                    if line.startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                    elif line.startswith(b"connection:") and b"close" in line:
                        close = True
                await reader.readexactly(length)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
                self.ok += 1
                if close:
                    writer.close()
                    reader = writer = None
                    self.reconnects += 1
            except (OSError, asyncio.IncompleteReadError, RuntimeError) as e:
                self.failed += 1
                key = type(e).__name__
                self.errors[key] = self.errors.get(key, 0) + 1
                if writer is not None:
                    writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.concurrency)))


async def http_measure(addr: tuple[str, int], n: int, concurrency: int) -> dict[str, float]:
    """Keep-alive req/s and latency with a client that parses HTTP (answers of any length)."""
    latencies: list[int] = []
    left = n

    async def worker() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection(*addr)
        try:
            while left > 0:
                left -= 1
                t0 = time.perf_counter_ns()
                writer.write(b"GET /bench HTTP/1.1\r\nHost: bench\r\n\r\n")
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
                               if line.startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
                latencies.append(time.perf_counter_ns() - t0)
        finally:
            writer.close()

    left = max(200, n // 10)
    await asyncio.gather(*(worker() for _ in range(concurrency)))  # warm-up
    latencies.clear()
    left = n
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return {"rps": len(latencies) / elapsed, "p50": latencies[len(latencies) // 2] / 1e6,
            "p99": latencies[int(len(latencies) * 0.99)] / 1e6}


# --- the benchmark --------------------------------------------------------------------------------


async def bench(a: Any, state: Path, kubeconfig: Path) -> None:
    pool_addr = (PUBLIC, POOL_PORT)
    await apply(kubeconfig, pool_body([BACKEND_PORTS[0]]))
    await wait_pool(kubeconfig)
    print(f"isthmus lb benchmark: {os.cpu_count()} CPUs, concurrency {a.concurrency}, {a.requests} keep-alive "
          f"requests per target (HAProxy {haproxy_version()})")

    # 1. throughput and latency
    direct = await measure("keep-alive", ("127.0.0.1", BACKEND_PORTS[0]), a.requests, a.concurrency)
    cpu0 = worker_cpu(state, POOL)
    http_pool = await measure("keep-alive", pool_addr, a.requests, a.concurrency)
    cpu1 = worker_cpu(state, POOL)
    tcp_pool = await measure("keep-alive", (PUBLIC, TCP_PORT), a.requests, a.concurrency)
    cpu2 = worker_cpu(state, POOL)
    counted = a.requests + max(200, a.requests // 10)  # measure() warms up first
    print("\nkeep-alive HTTP requests, the same client for every target:")
    print(f"  {'target':<22} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'req/s vs direct':>16} {'p99 vs direct':>14}")
    for name, r in (("direct (the backend)", direct), ("pool, HTTP frontend", http_pool),
                    ("pool, TCP frontend", tcp_pool)):
        print(f"  {name:<22} {r['rps']:>9.0f} {r['p50']:>8.3f} {r['p99']:>8.3f} "
              f"{r['rps'] / direct['rps']:>16.2f} {r['p99'] / direct['p99']:>14.2f}")
    echo_direct = await http_measure(("127.0.0.1", ECHO_PORT), a.echo_requests, a.concurrency)
    echo_pool = await http_measure((PUBLIC, ECHO_FRONTEND_PORT), a.echo_requests, a.concurrency)
    for name, r in (("echo pod, direct", echo_direct), ("echo pod, pool (HTTP)", echo_pool)):
        print(f"  {name:<22} {r['rps']:>9.0f} {r['p50']:>8.3f} {r['p99']:>8.3f} "
              f"{r['rps'] / echo_direct['rps']:>16.2f} {r['p99'] / echo_direct['p99']:>14.2f}")
    print(f"  HAProxy CPU per request: HTTP frontend {(cpu1 - cpu0) / counted * 1e6:.1f} µs, "
          f"TCP frontend {(cpu2 - cpu1) / counted * 1e6:.1f} µs (client, backend and HAProxy share "
          f"{os.cpu_count()} CPUs)")

    # 2. reloads under load
    before = master_reloads(state, POOL)
    load = Load(pool_addr, a.concurrency, limit=10_000_000)
    task = asyncio.create_task(load.run())
    t0 = time.perf_counter()
    for i in range(1, a.reloads + 1):
        await apply(kubeconfig, pool_body([BACKEND_PORTS[0]], generation_tag=i))
        await wait_pool(kubeconfig)
    elapsed = time.perf_counter() - t0
    load.stopping = True
    await task
    reloads = master_reloads(state, POOL) - before
    print(f"\nreloads under load: {a.reloads} spec changes in {elapsed:.1f}s, HAProxy reloads counted: {reloads}; "
          f"requests answered {load.ok} (reconnects after Connection: close {load.reconnects}), "
          f"failed {load.failed} {load.errors or ''}")

    # 3. endpoint changes through the runtime API
    before = master_reloads(state, POOL)
    load = Load(pool_addr, a.concurrency, limit=10_000_000)
    task = asyncio.create_task(load.run())
    t0 = time.perf_counter()
    sets = [[BACKEND_PORTS[0], BACKEND_PORTS[1]], [BACKEND_PORTS[1], BACKEND_PORTS[2]], [BACKEND_PORTS[0], BACKEND_PORTS[2]]]
    tag = a.reloads  # the same map as the last reload: only servers change
    for i in range(a.endpoint_changes):
        await apply(kubeconfig, pool_body(sets[i % len(sets)], generation_tag=tag))
    await wait_pool(kubeconfig)
    elapsed = time.perf_counter() - t0
    load.stopping = True
    await task
    reloads = master_reloads(state, POOL) - before
    print(f"endpoint changes: {a.endpoint_changes} in {elapsed:.1f}s ({a.endpoint_changes / elapsed:.0f}/s), "
          f"HAProxy reloads: {reloads}; requests answered {load.ok}, failed {load.failed} {load.errors or ''}")

    # 4. Ingress edit → new rule serving
    await ingress_edits(a, kubeconfig)

    # 5. translation time
    translation_time(a.rules)


async def ingress_edits(a: Any, kubeconfig: Path) -> None:
    cfg = f"frontends:\n  http:\n    port: {INGRESS_PORT}\nrole: slave_public\n"

    def ingress(paths: int) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "edits", "namespace": NS,
                         "annotations": {"kubernetes.io/ingress.class": "edgelb", "kubernetes.dcos.io/dklb-config": cfg}},
            "spec": {"rules": [{"host": "edits.bench", "http": {"paths": [
                {"path": f"/edit-{i}", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"number": 80}}}} for i in range(paths + 1)
            ]}}]},
        }

    await apply(kubeconfig, ingress(0))
    addr = None
    deadline = time.monotonic() + 60
    while addr is None:
        ing = json.loads(await kubectl(kubeconfig, "get", "ingress", "edits", "-n", NS, "-o", "json"))
        for entry in ((ing.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            if entry.get("ip"):
                addr = (entry["ip"], INGRESS_PORT)
                break
        if time.monotonic() > deadline:
            raise SystemExit("the edits Ingress got no address in 60s")
        await asyncio.sleep(0.1)
    for _ in range(600):  # bounded: 30 s
        if await http_status(addr, "/edit-0", "edits.bench") == 200:
            break
        await asyncio.sleep(0.05)
    else:
        raise SystemExit("the edits Ingress did not serve /edit-0 within 30s")
    times = []
    for i in range(1, a.edits + 1):
        t0 = time.perf_counter()
        await apply(kubeconfig, ingress(i))
        while await http_status(addr, f"/edit-{i}", "edits.bench") != 200:
            if time.perf_counter() - t0 > 30:
                raise SystemExit(f"/edit-{i} not served 30s after the edit")
            await asyncio.sleep(0.01)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"Ingress edit → new rule serving: {a.edits} edits, p50 {times[len(times) // 2] * 1000:.0f} ms, "
          f"p99 {times[min(len(times) - 1, int(len(times) * 0.99))] * 1000:.0f} ms")


def translation_time(rules: int) -> None:
    """The translator's pure function on one Ingress with `rules` host/path rules over 10 Services."""
    sys.path.insert(0, str(ROOT / "src"))
    from isthmus.api.lb import parse_ingress_config
    from isthmus.lb.translate import translate_ingress

    services = {f"{NS}/svc-{i}": {"metadata": {"namespace": NS, "name": f"svc-{i}"},
                                  "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30000 + i}]}}
                for i in range(10)}  # fmt: skip
    kinds = ("Exact", "Prefix", "ImplementationSpecific")
    ingress = {"metadata": {"namespace": NS, "name": "big"}, "spec": {"rules": [
        {"host": f"h{i % 50}.bench.example", "http": {"paths": [{
            "path": f"/p{i}/{'x' * (i % 7)}", "pathType": kinds[i % 3],
            "backend": {"service": {"name": f"svc-{i % 10}", "port": {"number": 80}}}}]}}
        for i in range(rules)]}}  # fmt: skip
    cfg = parse_ingress_config({})
    nodes = ["127.0.0.1", "127.0.0.2"]
    translate_ingress(CLUSTER, ingress, cfg, services, nodes)  # warm-up
    runs = 5
    t0 = time.perf_counter()
    for _ in range(runs):
        frag = translate_ingress(CLUSTER, ingress, cfg, services, nodes)
    per = (time.perf_counter() - t0) / runs
    print(f"translation of one Ingress with {rules} rules ({len(frag.frontends[0].link_backend.map)} routing "
          f"entries, {len(frag.backends)} backends): {per * 1000:.1f} ms")


def haproxy_version() -> str:
    out = subprocess.run(["haproxy", "-v"], capture_output=True, text=True, check=False).stdout
    return out.split()[2] if out else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--echo-requests", type=int, default=10000, help="keep-alive requests to the echo pod per target")
    ap.add_argument("--reloads", type=int, default=100)
    ap.add_argument("--endpoint-changes", type=int, default=1000)
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--rules", type=int, default=1000)
    ap.add_argument("--role", choices=["backend", "cluster"], help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="a tenth of every count (smoke run, make bench-quick)")
    a = ap.parse_args()
    if a.quick:
        for name in ("requests", "echo_requests", "reloads", "endpoint_changes", "edits", "rules"):
            setattr(a, name, max(2, getattr(a, name) // 10))
    if a.role == "backend":
        asyncio.run(run_backend())
        return
    if a.role == "cluster":
        asyncio.run(run_cluster(Path(a.state)))
        return
    procs: list[subprocess.Popen[str]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-lb-") as tmp:
        state = Path(tmp)
        kubeconfig = state / "kubeconfig"
        try:
            for role in ("backend", "cluster"):
                p = spawn([PY, __file__, "--role", role, "--state", tmp], env)
                procs.append(p)
                wait_ready(p, role)
            for name, args in (
                ("pools", ["--public-address", PUBLIC, "--private-address", PRIVATE, "--state-dir", str(state / "pools")]),
                ("lb", ["--cluster-name", CLUSTER]),
            ):
                with open(state / f"{name}.log", "w") as log:  # read it when a figure looks wrong
                    procs.append(subprocess.Popen([PY, "-c", CLI, name, "--kubeconfig", str(kubeconfig), *args],
                                                  stdout=log, stderr=subprocess.STDOUT, env=env))
            asyncio.run(bench(a, state / "pools", kubeconfig))
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(15)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()


if __name__ == "__main__":
    main()
