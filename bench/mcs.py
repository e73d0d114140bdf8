"""Benchmark of discovery: a broker and 3 clusters on the embedded apiserver, real agents.

Every apiserver and every `isthmus agent` runs as its own process (as users run them), so agent
RSS is measured per process. Prints: export → ServiceImport visible in another cluster latency
(p50/p99), time for 1,000 services exported from all 3 clusters to converge everywhere with
the agents' RSS, and the VIP allocator's speed. Everything stays on 127.0.0.1.

Usage: python bench/mcs.py [--services N] [--samples N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.discovery_v1 import Endpoint, EndpointConditions, EndpointPort
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import MCS_GROUP, MCS_VERSION
from isthmus.mcs.allocator import VipAllocator

CLUSTERS = ("c1", "c2", "c3")
SvcExport = create_namespaced_resource(MCS_GROUP, MCS_VERSION, "ServiceExport", "serviceexports")
SvcImport = create_namespaced_resource(MCS_GROUP, MCS_VERSION, "ServiceImport", "serviceimports")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(argv: list[str], wait_for: str | None = None) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen([sys.executable, "-m", "isthmus", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    line = ""
    if wait_for:
        assert p.stdout
        for line in p.stdout:
            if wait_for in line:
                break
    return p, line


def cli(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "isthmus", *argv], check=True, capture_output=True, timeout=120)


def client(kubeconfig: Path) -> AsyncClient:
    return AsyncClient(config=KubeConfig.from_file(str(kubeconfig)))


async def export(c: AsyncClient, ns: str, name: str, index: int, cluster: int) -> None:
    await prepare(c, ns, name, index, cluster)
    await c.create(SvcExport(metadata=ObjectMeta(name=name, namespace=ns)))


async def prepare(c: AsyncClient, ns: str, name: str, index: int, cluster: int) -> None:
    """The Service and its endpoints, as the cluster would have them before anyone exports."""
    await c.create(Service(metadata=ObjectMeta(name=name, namespace=ns),
                           spec=ServiceSpec(clusterIP=f"127.{100 + cluster}.{index // 250}.{index % 250 + 1}",
                                            ports=[ServicePort(name="http", port=80, protocol="TCP")])))
    await c.create(EndpointSlice(
        metadata=ObjectMeta(name=f"{name}-abc", namespace=ns, labels={"kubernetes.io/service-name": name}),
        addressType="IPv4",
        endpoints=[Endpoint(addresses=[f"127.{110 + cluster}.{index // 250}.{index % 250 + 1}"],
                            conditions=EndpointConditions(ready=True))],
        ports=[EndpointPort(name="http", port=8080, protocol="TCP")]))


async def latency(clients: list[AsyncClient], samples: int) -> list[float]:
    """Export from c1, see the ServiceImport appear in c2 (watch), one at a time."""
    for c in clients:
        await c.create(Namespace(metadata=ObjectMeta(name="lat")))
    seen: dict[str, float] = {}
    got = asyncio.Event()

    async def watch() -> None:
        async for typ, obj in clients[1].watch(SvcImport, namespace="lat"):
            if typ == "ADDED":
                seen[obj.metadata.name] = time.perf_counter()
                got.set()

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.5)
    out: list[float] = []
    for i in range(samples):
        name = f"lat-{i}"
        got.clear()
        t0 = time.perf_counter()
        await export(clients[0], "lat", name, i, 0)
        async with asyncio.timeout(30):
            while name not in seen:
                await got.wait()
                got.clear()
        out.append((seen[name] - t0) * 1000)
    task.cancel()
    return out


async def converge(clients: list[AsyncClient], n: int) -> float:
    """Services and endpoints first (not timed), then n ServiceExports per cluster, timed from the first
    export until every cluster imports every service with all clusters in status.clusters."""
    for c in clients:
        await c.create(Namespace(metadata=ObjectMeta(name="bulk")))
    sem = asyncio.Semaphore(16)

    async def bounded(coro: Any) -> None:
        async with sem:
            await coro

    await asyncio.gather(*(bounded(prepare(clients[ci], "bulk", f"svc-{i}", i, ci))
                           for ci in range(len(clients)) for i in range(n)))
    t0 = time.perf_counter()
    await asyncio.gather(*(bounded(clients[ci].create(SvcExport(metadata=ObjectMeta(name=f"svc-{i}", namespace="bulk"))))
                           for ci in range(len(clients)) for i in range(n)))
    print(f"  exported {n} services x {len(clients)} clusters in {time.perf_counter() - t0:.1f}s; "
          "waiting for convergence…", flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        done = 0
        for c in clients:
            async for imp in c.list(SvcImport, namespace="bulk"):
                if len((imp.status or {}).get("clusters") or []) == len(clients):
                    done += 1
        if done == n * len(clients):
            return time.perf_counter() - t0
        await asyncio.sleep(1.0)
    raise TimeoutError(f"not converged: {done}/{n * len(clients)}")


def allocator_speed() -> float:
    a = VipAllocator("243.0.0.0/16")
    t0 = time.perf_counter()
    for _ in range(a.size):
        a.allocate()
    return time.perf_counter() - t0


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    procs: list[subprocess.Popen[str]] = []
    results: dict[str, Any] = {}
    try:
        kcs: dict[str, Path] = {}
        for name in ("broker", *CLUSTERS):
            data = tmp / name
            p, _ = start(["apiserver", "--port", "0", "--data-dir", str(data), "--log-level", "warning"],
                         wait_for="listening on")
            procs.append(p)
            kcs[name] = data / "kubeconfig"
        while not all(k.exists() for k in kcs.values()):  # noqa: ASYNC110 - files, not events
            await asyncio.sleep(0.05)
        info = tmp / "broker-info.subm"
        cli("deploy-broker", "--kubeconfig", str(kcs["broker"]), "-o", str(info))
        for cid in CLUSTERS:
            cli("join", str(info), "--kubeconfig", str(kcs[cid]), "--cluster-id", cid,
                "--broker-kubeconfig", str(kcs["broker"]))
        agents = []
        for cid in CLUSTERS:
            p, _ = start(["agent", "--kubeconfig", str(kcs[cid]), "--cluster-id", cid, "--log-level", "warning"])
            procs.append(p)
            agents.append(p)
        clients = [client(kcs[c]) for c in CLUSTERS]
        await asyncio.sleep(2.0)  # agents elect themselves and sync
        results["agent RSS idle MB"] = max(rss_mb(p.pid) for p in agents)
        lat = sorted(await latency(clients, args.samples))
        results["export→import p50 ms"] = statistics.median(lat)
        results["export→import p99 ms"] = lat[max(0, int(len(lat) * 0.99) - 1)]
        cpu0 = {p.pid: cpu_s(p.pid) for p in procs}
        results[f"{args.services} svc x 3 clusters converge s"] = await converge(clients, args.services)
        results["agent RSS after MB (max of 3)"] = max(rss_mb(p.pid) for p in agents)
        names = ["broker apiserver", *(f"{c} apiserver" for c in CLUSTERS), *(f"{c} agent" for c in CLUSTERS)]
        for name, p in zip(names, procs, strict=True):
            results[f"  CPU s during convergence: {name}"] = cpu_s(p.pid) - cpu0[p.pid]
        for c in clients:
            await c.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    results["VIP allocator: all 65,534 of a /16 s"] = allocator_speed()
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-mcs-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    targets = {"export→import p99 ms": "≤ 500", "clusters converge": "≤ 60 s", "VIP allocator": "≤ 1 s"}
    print(f"\nisthmus discovery benchmark ({os.cpu_count()} cores, Python {sys.version.split()[0]})")
    print(f"{'measure':44} {'value':>10}  target")
    for k, v in results.items():
        target = next((t for name, t in targets.items() if name in k), "")
        print(f"{k:44} {v:10.2f}  {target}")


if __name__ == "__main__":
    main()
