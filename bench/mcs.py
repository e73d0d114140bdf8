"""Benchmark of discovery: a broker and N clusters on the embedded apiserver, real agents.

Every apiserver and every `isthmus agent` runs as its own process (as users run them), so RSS and
CPU are measured per process. Prints:

- export → ServiceImport visible in another cluster (p50/p99), one export at a time;
- S services exported from every cluster, timed from the first export until every cluster imports
  every service with all N clusters in its status, and holds N MCS EndpointSlices for it;
- CPU-seconds per part during that convergence (broker apiserver, member apiservers, agents, this
  client), the agents' CPU per service, their reconciles and API requests per service, RSS;
- an agent restarted with everything in place: time until it has resynced (leading, caches
  synced, every key reconciled, queue empty) and how many objects it rewrote (should be none);
- the VIP allocator's speed.

Usage: python bench/mcs.py [--clusters 3] [--services 1000] [--samples 100] [--quick] [--profile DIR]
Everything stays on 127.0.0.1. Only processes this script started are stopped, by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from lightkube import AsyncClient, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.discovery_v1 import Endpoint, EndpointConditions, EndpointPort
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MCS_GROUP, MCS_VERSION
from isthmus.discovery.allocator import VipAllocator
from isthmus.kube import transport
from isthmus.kube.client import client_for
from isthmus.local.up import pick_port
from isthmus.runtime.loop import loop_name, run

SvcExport = create_namespaced_resource(MCS_GROUP, MCS_VERSION, "ServiceExport", "serviceexports")
SvcImport = create_namespaced_resource(MCS_GROUP, MCS_VERSION, "ServiceImport", "serviceimports")
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A port outside the ephemeral range (see isthmus.local.up.PORT_POOL)."""
    return pick_port(set())


def start(argv: list[str], wait_for: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-m", "isthmus", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env)
    if wait_for:
        assert p.stdout
        for line in p.stdout:
            if wait_for in line:
                break
    return p


def stop(p: subprocess.Popen[str]) -> None:
    if p.poll() is None:
        p.terminate()
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def cli(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "isthmus", *argv], check=True, capture_output=True, timeout=120)


def client(kubeconfig: Path) -> AsyncClient:
    return client_for(KubeConfig.from_file(str(kubeconfig)).get())


class Agent:
    """One `isthmus agent` process with its metrics endpoint."""

    def __init__(self, cid: str, kubeconfig: Path, profile: str | None = None) -> None:
        self.cid, self.kubeconfig, self.profile = cid, kubeconfig, profile
        self.port = free_port()
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "ISTHMUS_PROFILE": f"{self.profile}/{self.cid}"} if self.profile else None
        return start(["agent", "--kubeconfig", str(self.kubeconfig), "--cluster-id", self.cid,
                      "--log-level", "warning", "--metrics-addr", f"127.0.0.1:{self.port}"], env=env)

    def restart(self) -> None:
        stop(self.proc)
        self.proc = self._start()

    async def metrics(self, http: aiohttp.ClientSession) -> dict[str, float]:
        """Sums of the samples we read, by metric name (+ label values where they matter)."""
        async with http.get(f"http://127.0.0.1:{self.port}/metrics") as r:
            text = await r.text()
        out: dict[str, float] = {}
        for line in text.splitlines():
            m = re.match(r'(isthmus_(?:reconcile_total|workqueue_depth|rest_client_requests_total))\{([^}]*)\} (\S+)',
                         line)
            if not m:
                continue
            name, labels, value = m.group(1), m.group(2), float(m.group(3))
            if name == "isthmus_rest_client_requests_total":
                method = re.search(r'method="(\w+)"', labels)
                code = re.search(r'code="([^"]*)"', labels)
                if code and (code.group(1) == "<error>" or code.group(1) >= "400"):
                    kind = f"errors {method.group(1) if method else '?'}" if code.group(1) == "<error>" \
                        else f"failed {method.group(1) if method else '?'} {code.group(1)}"
                    out[f"requests {kind}"] = out.get(f"requests {kind}", 0.0) + value
                name = f"requests {method.group(1) if method else '?'}"
            out[name] = out.get(name, 0.0) + value
        return out

    async def ready(self, http: aiohttp.ClientSession) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"agent {self.cid} exited with {self.proc.returncode}")
        try:
            async with http.get(f"http://127.0.0.1:{self.port}/readyz") as r:
                return r.status == 200
        except aiohttp.ClientError:
            return False


async def prepare(c: AsyncClient, ns: str, name: str, index: int, cluster: int) -> None:
    """The Service and its endpoints, as the cluster would have them before anyone exports."""
    await c.create(Service(metadata=ObjectMeta(name=name, namespace=ns),
                           spec=ServiceSpec(clusterIP=f"127.{100 + cluster}.{index // 250}.{index % 250 + 1}",
                                            ports=[ServicePort(name="http", port=80, protocol="TCP")])))
    await c.create(EndpointSlice(
        metadata=ObjectMeta(name=f"{name}-abc", namespace=ns, labels={"kubernetes.io/service-name": name}),
        addressType="IPv4",
        endpoints=[Endpoint(addresses=[f"127.{130 + cluster}.{index // 250}.{index % 250 + 1}"],
                            conditions=EndpointConditions(ready=True))],
        ports=[EndpointPort(name="http", port=8080, protocol="TCP")]))


async def export(c: AsyncClient, name: str) -> None:
    with transport.answer_unread():  # what the server stored is not read: not decoded either
        await c.create(SvcExport(metadata=ObjectMeta(name=name, namespace="bulk")))


async def bounded_all(coros: list[Any], width: int = 32) -> None:
    sem = asyncio.Semaphore(width)

    async def one(coro: Any) -> None:
        async with sem:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


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
        await prepare(clients[0], "lat", name, 1000 + i, 0)
        t0 = time.perf_counter()
        await clients[0].create(SvcExport(metadata=ObjectMeta(name=name, namespace="lat")))
        async with asyncio.timeout(30):
            while name not in seen:
                await got.wait()
                got.clear()
        out.append((seen[name] - t0) * 1000)
    task.cancel()
    return out


class Converged:
    """Watches every cluster's ServiceImports in one namespace: done when each lists all clusters."""

    def __init__(self, clients: list[AsyncClient], ns: str, n: int) -> None:
        self.full: list[set[str]] = [set() for _ in clients]
        self.want = n
        self.clusters = len(clients)
        self.event = asyncio.Event()
        self.tasks = [asyncio.create_task(self._watch(c, i, ns)) for i, c in enumerate(clients)]

    async def _watch(self, c: AsyncClient, i: int, ns: str) -> None:
        """A bare watch (the client's TLS session and token, each line parsed once, no model objects):
        this process shares the machine with what it measures, so it spends as little as it can."""
        inner = c._client._client  # lightkube's httpx client: base URL, credentials, the aiohttp session
        session = inner._transport._session_for_loop()
        url = (f"{str(inner.base_url).rstrip('/')}/apis/{MCS_GROUP}/{MCS_VERSION}/namespaces/{ns}/serviceimports"
               "?watch=true")
        _, auth = transport._bearer(inner.auth)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with session.get(url, headers={"Authorization": auth} if auth else None, timeout=timeout) as r:
            r.raise_for_status()
            async for line in r.content:
                event = orjson.loads(line)
                typ, obj = event["type"], event["object"]
                name = obj["metadata"]["name"]
                if typ != "DELETED" and len((obj.get("status") or {}).get("clusters") or []) == self.clusters:
                    self.full[i].add(name)
                else:
                    self.full[i].discard(name)
                if all(len(f) >= self.want for f in self.full):
                    self.event.set()

    def done(self) -> int:
        return sum(len(f) for f in self.full)

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()


async def count_mcs_slices(c: AsyncClient, ns: str) -> int:
    return len([s async for s in c.list(EndpointSlice, namespace=ns,
                                        labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE})])


async def versions(c: AsyncClient, ns: str) -> dict[str, str]:
    """resourceVersion of every ServiceImport, EndpointSlice and ServiceExport in `ns`."""
    out: dict[str, str] = {}
    for res in (SvcImport, EndpointSlice, SvcExport):
        async for o in c.list(res, namespace=ns):
            out[f"{res.__name__}/{o.metadata.name}"] = o.metadata.resourceVersion
    return out


async def run_bench(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    names = [f"c{i + 1}" for i in range(args.clusters)]
    procs: list[subprocess.Popen[str]] = []
    agents: list[Agent] = []
    results: dict[str, Any] = {}
    http = aiohttp.ClientSession()
    try:
        kcs: dict[str, Path] = {}
        apiservers: dict[str, subprocess.Popen[str]] = {}
        for name in ("broker", *names):
            data = tmp / name
            apiservers[name] = start(["apiserver", "--port", "0", "--data-dir", str(data), "--log-level", "warning"],
                                     wait_for="listening on")
            procs.append(apiservers[name])
            kcs[name] = data / "kubeconfig"
        while not all(k.exists() for k in kcs.values()):  # noqa: ASYNC110 - files, not events
            await asyncio.sleep(0.05)
        info = tmp / "broker-info.subm"
        cli("deploy-broker", "--kubeconfig", str(kcs["broker"]), "-o", str(info))
        for cid in names:
            cli("join", str(info), "--kubeconfig", str(kcs[cid]), "--cluster-id", cid,
                "--broker-kubeconfig", str(kcs["broker"]))
        agents = [Agent(cid, kcs[cid], args.profile) for cid in names]
        clients = [client(kcs[c]) for c in names]
        while not all([await a.ready(http) for a in agents]):  # noqa: ASYNC110 - polling a process
            await asyncio.sleep(0.1)
        results["agent RSS idle MB (max)"] = max(rss_mb(a.proc.pid) for a in agents)
        lat = sorted(await latency(clients, args.samples))
        results["export→import p50 ms"] = statistics.median(lat)
        results["export→import p99 ms"] = lat[max(0, int(len(lat) * 0.99) - 1)]

        n, k = args.services, len(clients)
        for c in clients:
            await c.create(Namespace(metadata=ObjectMeta(name="bulk")))
        t0 = time.perf_counter()
        await bounded_all([prepare(clients[ci], "bulk", f"svc-{i}", i, ci) for ci in range(k) for i in range(n)])
        print(f"  prepared {n} Services + EndpointSlices in each of {k} clusters in "
              f"{time.perf_counter() - t0:.1f} s (not timed)", flush=True)
        before = {a.cid: await a.metrics(http) for a in agents}
        cpu0 = {p.pid: cpu_s(p.pid) for p in procs + [a.proc for a in agents]}
        me0 = time.process_time()
        watcher = Converged(clients, "bulk", n)
        await asyncio.sleep(0.5)
        t0 = time.perf_counter()
        await bounded_all([export(clients[ci], f"svc-{i}") for i in range(n) for ci in range(k)])
        print(f"  exported {n} services x {k} clusters in {time.perf_counter() - t0:.1f} s; waiting for "
              "convergence…", flush=True)
        try:
            async with asyncio.timeout(args.timeout):
                await watcher.event.wait()
        except TimeoutError:
            raise TimeoutError(f"not converged after {args.timeout} s: {watcher.done()}/{n * k}") from None
        finally:
            watcher.close()
        converge = time.perf_counter() - t0
        slices = [await count_mcs_slices(c, "bulk") for c in clients]
        while min(slices) < n * k and time.perf_counter() - t0 < args.timeout:  # the last slice copies
            await asyncio.sleep(0.2)
            slices = [await count_mcs_slices(c, "bulk") for c in clients]
        converge_slices = time.perf_counter() - t0
        results[f"{n} svc x {k} clusters: imports converge s"] = converge
        results[f"{n} svc x {k} clusters: + all {n * k} MCS slices per cluster s"] = converge_slices
        cpu = {pid: cpu_s(pid) - c0 for pid, c0 in cpu0.items()}
        results["agent RSS after MB (max)"] = max(rss_mb(a.proc.pid) for a in agents)
        results["apiserver RSS after MB (broker / max member)"] = (
            f"{rss_mb(apiservers['broker'].pid):.0f} / {max(rss_mb(apiservers[c].pid) for c in names):.0f}")
        agent_cpu = [cpu[a.proc.pid] for a in agents]
        results["CPU s: broker apiserver"] = cpu[apiservers["broker"].pid]
        results[f"CPU s: {k} member apiservers (sum)"] = sum(cpu[apiservers[c].pid] for c in names)
        results[f"CPU s: {k} agents (sum)"] = sum(agent_cpu)
        results["CPU s: this client (exports + watches)"] = time.process_time() - me0
        results["agent CPU ms per service (mean of agents)"] = statistics.mean(agent_cpu) * 1000 / n
        after = {a.cid: await a.metrics(http) for a in agents}
        delta = [{m: after[a.cid].get(m, 0.0) - before[a.cid].get(m, 0.0) for m in after[a.cid]} for a in agents]
        results["agent reconciles per service (mean)"] = statistics.mean(
            d.get("isthmus_reconcile_total", 0.0) for d in delta) / n
        results["agent API writes per service (mean)"] = statistics.mean(
            sum(d.get(f"requests {m}", 0.0) for m in WRITES) for d in delta) / n
        results["agent API reads per service (mean)"] = statistics.mean(d.get("requests GET", 0.0) for d in delta) / n
        failed = collections.Counter[str]()
        for d in delta:
            failed.update({m[len("requests "):]: int(v) for m, v in d.items()
                           if m.startswith(("requests failed", "requests errors")) and v})
        results["agent API answers ≥ 400 and requests without one (sum)"] = (
            ", ".join(f"{k}: {v}" for k, v in sorted(failed.items())) or "none")

        if not args.no_restart:
            await asyncio.sleep(2.0)  # let status writes settle before the snapshot
            first = agents[0]
            snap = await versions(clients[0], "bulk")
            restart_cpu0 = {name: cpu_s(apiservers[name].pid) for name in ("broker", names[0])}
            first.restart()
            t0 = time.perf_counter()
            keys = n + 1  # every bulk service, plus the latency namespace's
            while True:
                await asyncio.sleep(0.05)
                if not await first.ready(http):
                    continue
                m = await first.metrics(http)
                if m.get("isthmus_reconcile_total", 0) >= keys and m.get("isthmus_workqueue_depth", 1) == 0:
                    break
                if time.perf_counter() - t0 > 300:
                    raise TimeoutError("the restarted agent did not resync in 300 s")
            results[f"agent restart → resynced ({n + args.samples} imports) s"] = time.perf_counter() - t0
            results["  CPU s meanwhile: the agent (start-up included) / broker / its apiserver"] = (
                f"{cpu_s(first.proc.pid):.2f} / {cpu_s(apiservers['broker'].pid) - restart_cpu0['broker']:.2f}"
                f" / {cpu_s(apiservers[names[0]].pid) - restart_cpu0[names[0]]:.2f}")
            m = await first.metrics(http)
            results["  objects it rewrote / API writes it sent (lease and heartbeat included)"] = (
                f"{sum(1 for key, rv in (await versions(clients[0], 'bulk')).items() if snap.get(key) != rv)}"
                f" / {int(sum(m.get(f'requests {w}', 0) for w in WRITES))}")
            results["agent RSS after restart MB"] = rss_mb(first.proc.pid)
        for c in clients:
            await c.close()
    finally:
        await http.close()
        for a in agents:
            stop(a.proc)
        for p in procs:
            stop(p)
    return results


def allocator_speed() -> float:
    a = VipAllocator("243.0.0.0/16")  # arithmetic only: nothing is sent anywhere
    t0 = time.perf_counter()
    for _ in range(a.size):
        a.allocate()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clusters", type=int, default=3)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds convergence may take")
    ap.add_argument("--no-restart", action="store_true", help="skip the agent restart measurement")
    ap.add_argument("--quick", action="store_true", help="200 services, 20 samples")
    ap.add_argument("--profile", metavar="DIR", help="run the agents under cProfile: DIR/<cluster>.agent.<pid>.prof")
    args = ap.parse_args()
    if args.quick:
        args.services, args.samples = min(args.services, 200), min(args.samples, 20)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop our children
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-mcs-") as tmp:
        results = run(run_bench(args, Path(tmp)))
    results["VIP allocator: all 65,534 of a /16 s"] = allocator_speed()
    per_service = 15.0 / 1000
    targets = {"export→import p99": "≤ 100", "imports converge": f"≤ {per_service * args.services:.0f} s (15 s/1,000)",
               "agent RSS after MB": "≤ 300 at 10,000", "resynced": "≤ 10 s at 10,000",
               "objects it rewrote": "0 / few", "VIP allocator": "≤ 1 s"}
    print(f"\nisthmus discovery benchmark: {args.clusters} clusters, {args.services} services "
          f"({os.cpu_count()} cores, Python {sys.version.split()[0]}, {loop_name()} event loop)")
    print(f"{'measure':66} {'value':>12}  target")
    for k, v in results.items():
        target = next((t for name, t in targets.items() if name in k), "")
        shown = f"{v:12.2f}" if isinstance(v, float) else f"{v!s:>12}"
        print(f"{k:66} {shown}  {target}")


if __name__ == "__main__":
    main()
