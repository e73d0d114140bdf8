"""Benchmark of `isthmus apiserver` in persistent mode (SQLite). Prints figures; not a test.

The server runs as its own process (as users run it); load comes from separate client
processes so the client's own Python cost does not cap the figures. Everything is on 127.0.0.1.

Server CPU per operation (utime+stime of the server process, all its threads, from
/proc/<pid>/stat, over one phase divided by that phase's operations) is the figure to compare
across runs: on a shared machine wall-clock rates are noisy, CPU per operation much less so.
Watch: CPU over the watch phase divided by (events x watchers) per event delivered, and by
events per write (the write itself included).

Usage: python bench/apiserver.py [--quick] [--loop auto|uvloop|asyncio ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

TARGETS = {"creates/s (1 client)": "≥ 1500", "creates/s (8 clients)": "≥ 3000", "watch p99 ms": "≤ 20",
           "restart": "≤ 10 s (100k)"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a process (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


HEADERS: dict[str, str] = {}
"""The bearer token the server generated in its data dir (it never serves anonymously)."""


class Server:
    def __init__(self, data: Path, loop: str = "auto") -> None:
        self.data = data
        self.loop = loop
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> float:
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "isthmus", "apiserver", "--port", "0", "--no-tls",
                                      "--data-dir", str(self.data), "--log-level", "warning"],
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "ISTHMUS_EVENT_LOOP": self.loop})
        assert self.proc.stdout
        for line in self.proc.stdout:
            if "listening on" in line:
                self.url = line.split()[-1]
                break
        HEADERS["Authorization"] = f"Bearer {(self.data / 'token').read_text().strip()}"
        return time.monotonic() - t0

    def cpu(self) -> float:
        assert self.proc
        return cpu_s(self.proc.pid)

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


def cm(name: str, ns: str = "bench") -> dict:  # type: ignore[type-arg]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns,
                                                                   "labels": {"app": "bench"}},
            "data": {"key": "value-" + name, "other": "x" * 64}}


async def _create_range(url: str, prefix: str, n: int, ns: str = "bench") -> float:
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        t0 = time.perf_counter()
        for i in range(n):
            async with s.post(f"{url}/api/v1/namespaces/{ns}/configmaps", json=cm(f"{prefix}-{i}", ns)) as r:
                if r.status != 201:
                    raise RuntimeError(await r.text())
                await r.read()
        return time.perf_counter() - t0


def _client_proc(url: str, prefix: str, n: int, q: mp.Queue) -> None:  # type: ignore[type-arg]
    q.put(asyncio.run(_create_range(url, prefix, n)))


async def ensure_ns(url: str, name: str) -> None:
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        await s.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": name}})


async def gets(url: str, n: int) -> float:
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        t0 = time.perf_counter()
        for i in range(n):
            async with s.get(f"{url}/api/v1/namespaces/bench/configmaps/one-{i % 1000}") as r:
                await r.read()
        return n / (time.perf_counter() - t0)


async def updates(url: str, n: int) -> None:
    """n PUTs, each of the object as the previous write returned it (a new resourceVersion each)."""
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        objs: dict[int, dict] = {}  # type: ignore[type-arg]
        for i in range(n):
            j = i % 1000
            u = f"{url}/api/v1/namespaces/bench/configmaps/one-{j}"
            if j not in objs:
                async with s.get(u) as r:
                    objs[j] = await r.json()
            obj = objs[j]
            obj["data"]["key"] = f"v{i}"
            async with s.put(u, json=obj) as r:
                if r.status != 200:
                    raise RuntimeError(await r.text())
                objs[j] = await r.json()


def endpoint_slice(i: int, generation: int) -> dict:  # type: ignore[type-arg]
    """An MCS EndpointSlice as the discovery agent applies it: three endpoints, one port."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"svc-{i}-c1", "namespace": "bench",
                         "labels": {"multicluster.kubernetes.io/service-name": f"svc-{i}",
                                    "multicluster.kubernetes.io/source-cluster": "c1",
                                    "endpointslice.kubernetes.io/managed-by": "isthmus-mcs-agent"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [f"10.{generation}.{j}.{i % 250}"],
                           "conditions": {"ready": True, "serving": True, "terminating": False}}
                          for j in range(3)],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}


async def applies(url: str, n: int, generation: int) -> None:
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        for i in range(n):
            async with s.patch(f"{url}/apis/discovery.k8s.io/v1/namespaces/bench/endpointslices/svc-{i}-c1",
                               params={"fieldManager": "bench", "force": "true"},
                               data=orjson.dumps(endpoint_slice(i, generation)),
                               headers={"Content-Type": "application/apply-patch+yaml"}) as r:
                if r.status not in (200, 201):
                    raise RuntimeError(await r.text())
                await r.read()


async def list_time(url: str, ns: str) -> tuple[float, int]:
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        t0 = time.perf_counter()
        async with s.get(f"{url}/api/v1/namespaces/{ns}/configmaps") as r:
            body = await r.read()
        dt = time.perf_counter() - t0
    return dt, len(json.loads(body)["items"])


def _watchers_proc(url: str, n_watchers: int, n_events: int, rv: str, q: mp.Queue) -> None:  # type: ignore[type-arg]
    async def run() -> list[float]:
        lat: list[float] = []
        ready = 0

        async def one(s: aiohttp.ClientSession) -> None:
            nonlocal ready
            got = 0
            async with s.get(f"{url}/api/v1/namespaces/watch/configmaps?watch=1&resourceVersion={rv}"
                             "&timeoutSeconds=120") as r:
                ready += 1
                async for line in r.content:
                    now = time.time()
                    ev = json.loads(line)
                    sent = float(ev["object"]["metadata"]["annotations"]["sent"])
                    lat.append((now - sent) * 1000)
                    got += 1
                    if got >= n_events:
                        return

        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, headers=HEADERS) as s:
            tasks = [asyncio.create_task(one(s)) for _ in range(n_watchers)]
            while ready < n_watchers:  # noqa: ASYNC110 - a poll keeps the bench simple
                await asyncio.sleep(0.05)
            q.put("ready")
            await asyncio.wait_for(asyncio.gather(*tasks), 120)
        return lat

    q.put(asyncio.run(run()))


async def produce_events(url: str, n: int, rate: float) -> None:
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        for i in range(n):
            obj = cm(f"w-{i}", "watch")
            obj["metadata"]["annotations"] = {"sent": repr(time.time())}
            async with s.post(f"{url}/api/v1/namespaces/watch/configmaps", json=obj) as r:
                await r.read()
            await asyncio.sleep(1 / rate)


def populate_direct(data: Path, n: int) -> float:
    """Fill a data dir with n objects through the store (HTTP would take minutes for 100k)."""
    from isthmus.apiserver.storage.store import Store

    st = Store(str(data / "state.db"))
    st.open()
    t0 = time.perf_counter()
    if st.get("/namespaces", "", "big") is None:
        st.create("/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "big", "uid": "u-big", "creationTimestamp": "2026-01-01T00:00:00Z"},
                                  "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    for i in range(n):
        o = cm(f"big-{i}", "big")
        o["metadata"].update(uid=f"u-{i}", creationTimestamp="2026-01-01T00:00:00Z", generation=1)
        st.create("/configmaps", o)
    dt = time.perf_counter() - t0
    st.close()
    return dt


def run_once(loop: str, quick: bool) -> dict[str, float]:
    scale = 0.1 if quick else 1.0
    n1, n8 = int(5000 * scale), int(2500 * scale)
    big = int(100_000 * scale)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-") as tmp:
        data = Path(tmp) / "data"
        srv = Server(data, loop)
        srv.start()
        url = srv.url
        base_rss = rss_mb(srv.proc.pid)  # type: ignore[union-attr]
        asyncio.run(ensure_ns(url, "bench"))
        asyncio.run(ensure_ns(url, "watch"))

        c0 = srv.cpu()
        dt = asyncio.run(_create_range(url, "one", n1))
        results["creates/s (1 client)"] = n1 / dt
        results["  server CPU µs per create (1 client)"] = (srv.cpu() - c0) / n1 * 1e6

        q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        procs = [mp.Process(target=_client_proc, args=(url, f"c{i}", n8, q)) for i in range(8)]
        c0 = srv.cpu()
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        results["creates/s (8 clients)"] = 8 * n8 / (time.perf_counter() - t0)
        results["  server CPU µs per create (8 clients)"] = (srv.cpu() - c0) / (8 * n8) * 1e6

        n_gets = int(5000 * scale)
        c0 = srv.cpu()
        results["gets/s (1 client)"] = asyncio.run(gets(url, n_gets))
        results["  server CPU µs per get"] = (srv.cpu() - c0) / n_gets * 1e6

        n_upd = int(2000 * scale)
        c0 = srv.cpu()
        t0 = time.perf_counter()
        asyncio.run(updates(url, n_upd))
        results["updates/s (1 client)"] = n_upd / (time.perf_counter() - t0)
        results["  server CPU µs per update"] = (srv.cpu() - c0) / n_upd * 1e6

        # watch latency: 100 watchers in 4 processes, one writer at a steady rate
        n_events = int(200 * scale) or 20
        n_watchers = 100

        async def current_rv() -> str:
            async with aiohttp.ClientSession(headers=HEADERS) as s, s.get(f"{url}/api/v1/namespaces/watch/configmaps") as r:
                return str((await r.json())["metadata"]["resourceVersion"])

        rv = asyncio.run(current_rv())
        wq: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        wprocs = [mp.Process(target=_watchers_proc, args=(url, n_watchers // 4, n_events, rv, wq)) for _ in range(4)]
        for p in wprocs:
            p.start()
        for _ in wprocs:
            assert wq.get(timeout=60) == "ready"
        c0 = srv.cpu()
        asyncio.run(produce_events(url, n_events, rate=100))
        lat: list[float] = []
        for _ in wprocs:
            lat += wq.get(timeout=120)
        watch_cpu = srv.cpu() - c0
        for p in wprocs:
            p.join()
        lat.sort()
        results["watch p50 ms"] = statistics.median(lat)
        results["watch p99 ms"] = lat[int(len(lat) * 0.99) - 1]
        results[f"  server CPU µs per event delivered ({n_watchers} watchers)"] = (
            watch_cpu / (n_events * n_watchers) * 1e6)
        results[f"  server CPU µs per write ({n_watchers} watchers)"] = watch_cpu / n_events * 1e6

        listed = n1 + 8 * n8
        dt, count = asyncio.run(list_time(url, "bench"))
        results[f"list {count} objects ms"] = dt * 1000
        loaded_rss = rss_mb(srv.proc.pid)  # type: ignore[union-attr]
        results["RSS MB per 10k objects (live)"] = (loaded_rss - base_rss) / (listed / 10_000)

        # server-side apply, the discovery agents' write: an EndpointSlice created, applied again
        # unchanged (a resync), then with new endpoints
        n_apply = int(2000 * scale)
        for phase, generation in (("create", 0), ("unchanged", 0), ("changed", 1)):
            c0 = srv.cpu()
            t0 = time.perf_counter()
            asyncio.run(applies(url, n_apply, generation))
            results[f"applies/s, {phase} (1 client)"] = n_apply / (time.perf_counter() - t0)
            results[f"  server CPU µs per apply, {phase}"] = (srv.cpu() - c0) / n_apply * 1e6
        srv.stop()

        results[f"populate {big} via store s"] = populate_direct(data, big)
        total = big + listed + n_apply
        restart = srv.start()
        results[f"restart {total // 1000}k objects s"] = restart
        results["RSS MB at restart"] = rss_mb(srv.proc.pid)  # type: ignore[union-attr]
        dt, count = asyncio.run(list_time(srv.url, "big"))
        results[f"list {count} objects ms"] = dt * 1000
        srv.stop()
    return results


def main() -> None:
    from isthmus.runtime.loop import loop_name

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller counts (smoke run, < 30 s)")
    ap.add_argument("--loop", action="append", choices=["auto", "uvloop", "asyncio"],
                    help="the server's event loop (ISTHMUS_EVENT_LOOP); repeat to compare (default: auto)")
    args = ap.parse_args()
    for loop in args.loop or ["auto"]:
        results = run_once(loop, args.quick)
        print(f"\nisthmus apiserver benchmark (persistent mode, {os.cpu_count()} cores, Python "
              f"{sys.version.split()[0]}, server event loop: {loop_name(loop)}{' --quick' if args.quick else ''})")
        print(f"{'measure':58} {'value':>10}  target")
        for k, v in results.items():
            target = next((t for name, t in TARGETS.items() if k.startswith(name)), "")
            print(f"{k:58} {v:10.1f}  {target}")


if __name__ == "__main__":
    main()
