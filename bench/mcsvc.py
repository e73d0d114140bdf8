"""Benchmark of exposure (MultiClusterService): a broker and 3 clusters on the embedded apiserver,
every part its own process as users run them (apiservers, discovery agents, `isthmus mcsvc` per
cluster, `isthmus mcsvc-broker --provider haproxy`).

Prints, against the issue's targets:
- MultiClusterService created → reachable from a consumer: the consumer cluster has the
  ServiceImport and the provider's EndpointSlice next to it (what its DNS server and proxy serve
  from), p50/p99 over --samples objects created one at a time;
- --services MultiClusterServices (CrossCluster, providers c1+c2, every cluster consuming) created
  at once → all `Ready=True`;
- an endpoint change in a provider → the load balancer's backends (the haproxy provider's
  LoadBalancerPool) hold the new address, p50/p99.
CPU seconds of every process during the convergence are printed too. Everything stays on 127.0.0.1.

Usage: python bench/mcsvc.py [--services N] [--samples N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.types import PatchType

sys.path.insert(0, str(Path(__file__).parent))
from mcs import SvcImport, cli, client, cpu_s, prepare, rss_mb, start

from isthmus.api.lb import LoadBalancerPool
from isthmus.api.mcsvc import GROUP, VERSION, pool_name
from isthmus.kube.resources import resource_for

CLUSTERS = ("c1", "c2", "c3")

MCS = create_namespaced_resource(GROUP, VERSION, "MultiClusterService", "multiclusterservices")
POOL: Any = resource_for(LoadBalancerPool)


async def create_mcs(broker: AsyncClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    await broker.create(MCS.from_dict({"apiVersion": f"{GROUP}/{VERSION}", "kind": "MultiClusterService",
                                       "metadata": {"name": name, "namespace": ns}, "spec": spec}))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q + 0.999) - 1)]


async def reachable(broker: AsyncClient, clients: list[AsyncClient], samples: int) -> list[float]:
    """Create one MultiClusterService at a time (c1 provides, c3 consumes); watch c3's slices."""
    ns = "lat"
    for c in (broker, *clients):
        await c.create(Namespace(metadata=ObjectMeta(name=ns)))
    for i in range(samples):
        await prepare(clients[0], ns, f"lat-{i}", i, 0)
    seen: dict[str, float] = {}
    got = asyncio.Event()

    async def watch() -> None:
        async for typ, obj in clients[2].watch(EndpointSlice, namespace=ns):
            name = (obj.metadata.labels or {}).get("multicluster.kubernetes.io/service-name")
            if typ in ("ADDED", "MODIFIED") and name and obj.endpoints and name not in seen:
                if await _imported(clients[2], ns, name):
                    seen[name] = time.perf_counter()
                    got.set()

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.5)
    out = []
    for i in range(samples):
        name = f"lat-{i}"
        got.clear()
        t0 = time.perf_counter()
        await create_mcs(broker, ns, name, {"types": ["CrossCluster"], "providerClusters": [{"name": "c1"}],
                                            "consumerClusters": [{"name": "c3"}]})
        async with asyncio.timeout(30):
            while name not in seen:
                await got.wait()
                got.clear()
        out.append((seen[name] - t0) * 1000)
    task.cancel()
    return out


async def _imported(c: AsyncClient, ns: str, name: str) -> bool:
    try:
        await c.get(SvcImport, name, namespace=ns)
        return True
    except Exception:
        return False


async def converge(broker: AsyncClient, clients: list[AsyncClient], n: int) -> float:
    ns = "bulk"
    for c in (broker, *clients):
        await c.create(Namespace(metadata=ObjectMeta(name=ns)))
    sem = asyncio.Semaphore(16)

    async def bounded(coro: Any) -> None:
        async with sem:
            await coro

    await asyncio.gather(*(bounded(prepare(clients[ci], ns, f"svc-{i}", i, ci)) for ci in (0, 1) for i in range(n)))
    t0 = time.perf_counter()
    await asyncio.gather(*(bounded(create_mcs(broker, ns, f"svc-{i}", {
        "types": ["CrossCluster"], "providerClusters": [{"name": "c1"}, {"name": "c2"}]})) for i in range(n)))
    print(f"  created {n} MultiClusterServices in {time.perf_counter() - t0:.1f}s; waiting for Ready…", flush=True)
    deadline = time.monotonic() + 600
    ready = 0
    while time.monotonic() < deadline:
        ready = 0
        async for obj in broker.list(MCS, namespace=ns):
            conds = (obj.to_dict().get("status") or {}).get("conditions") or []
            ready += any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
        if ready == n:
            return time.perf_counter() - t0
        await asyncio.sleep(0.5)
    raise TimeoutError(f"not converged: {ready}/{n} Ready")


async def backend_updates(broker: AsyncClient, clients: list[AsyncClient], samples: int) -> list[float]:
    ns = "edge"
    for c in (broker, *clients):
        await c.create(Namespace(metadata=ObjectMeta(name=ns)))
    for ci in (0, 1):
        await prepare(clients[ci], ns, "shop", 7, ci)
    await create_mcs(broker, ns, "shop", {"types": ["LoadBalancer"], "providerClusters": [{"name": "c1"},
                                                                                       {"name": "c2"}]})
    pname = pool_name(ns, "shop")

    async def servers() -> set[str]:
        try:
            pool = LoadBalancerPool.from_dict((await broker.get(POOL, pname)).to_dict())
        except Exception:
            return set()
        return {s.address for b in pool.spec.haproxy.backends for s in b.servers}

    async with asyncio.timeout(60):
        while len(await servers()) < 2:  # noqa: ASYNC110 - polls the API, as a user would
            await asyncio.sleep(0.05)
    out = []
    for i in range(samples):
        address = f"127.150.{i // 250}.{i % 250 + 1}"
        t0 = time.perf_counter()
        await clients[0].patch(EndpointSlice, "shop-abc", {"endpoints": [
            {"addresses": [address], "conditions": {"ready": True}}]}, namespace=ns, patch_type=PatchType.MERGE)
        async with asyncio.timeout(30):
            while address not in await servers():  # noqa: ASYNC110 - polls the API
                await asyncio.sleep(0.005)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    procs: dict[str, Any] = {}
    results: dict[str, Any] = {}
    try:
        kcs: dict[str, Path] = {}
        for name in ("broker", *CLUSTERS):
            data = tmp / name
            procs[f"{name} apiserver"] = start(["apiserver", "--port", "0", "--data-dir", str(data),
                                                   "--log-level", "warning"], wait_for="listening on")
            kcs[name] = data / "kubeconfig"
        while not all(k.exists() for k in kcs.values()):  # noqa: ASYNC110 - files, not events
            await asyncio.sleep(0.05)
        info = tmp / "broker-info.subm"
        cli("deploy-broker", "--kubeconfig", str(kcs["broker"]), "-o", str(info))
        for cid in CLUSTERS:
            cli("join", str(info), "--kubeconfig", str(kcs[cid]), "--cluster-id", cid,
                "--broker-kubeconfig", str(kcs["broker"]))
        broker = client(kcs["broker"])
        await broker.create(Namespace(metadata=ObjectMeta(name="isthmus-system")))
        for cid in CLUSTERS:
            procs[f"{cid} agent"] = start(["agent", "--kubeconfig", str(kcs[cid]), "--cluster-id", cid,
                                              "--log-level", "warning"])
            procs[f"{cid} mcsvc"] = start(["mcsvc", "--kubeconfig", str(kcs[cid]), "--cluster-id", cid,
                                              "--log-level", "warning"])
        procs["mcsvc-broker"] = start(["mcsvc-broker", "--kubeconfig", str(kcs["broker"]), "--provider",
                                          "haproxy", "--log-level", "warning"])
        clients = [client(kcs[c]) for c in CLUSTERS]
        await asyncio.sleep(3.0)  # leaders elected, caches synced
        lat = await reachable(broker, clients, args.samples)
        results["created → reachable in consumer p50 ms"] = statistics.median(lat)
        results["created → reachable in consumer p99 ms"] = percentile(lat, 0.99)
        cpu0 = {name: cpu_s(p.pid) for name, p in procs.items()}
        results[f"{args.services} MultiClusterServices x 3 clusters Ready s"] = await converge(
            broker, clients, args.services)
        for name, p in procs.items():
            if "mcsvc" in name or "agent" in name or name == "broker apiserver":
                results[f"  CPU s during convergence: {name}"] = cpu_s(p.pid) - cpu0[name]
        results["mcsvc RSS after MB (max of 3)"] = max(rss_mb(procs[f"{c} mcsvc"].pid) for c in CLUSTERS)
        upd = await backend_updates(broker, clients, args.samples)
        results["endpoint change → LB backends p50 ms"] = statistics.median(upd)
        results["endpoint change → LB backends p99 ms"] = percentile(upd, 0.99)
        for c in (broker, *clients):
            await c.close()
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except Exception:
                p.kill()
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--samples", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-mcsvc-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    targets = {"reachable in consumer p99": "≤ 1000", "Ready s": "≤ 60 s", "LB backends p99": "≤ 1000"}
    print(f"\nisthmus exposure benchmark ({os.cpu_count()} cores, Python {sys.version.split()[0]})")
    print(f"{'measure':52} {'value':>10}  target")
    for k, v in results.items():
        target = next((t for name, t in targets.items() if name in k), "")
        print(f"{k:52} {v:10.2f}  {target}")


if __name__ == "__main__":
    main()
