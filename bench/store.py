"""Micro-benchmark of the apiserver store: prints figures, asserts nothing.

Run: .venv/bin/python bench/store.py [--objects 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))  # runnable without installing

from isthmus.apiserver.storage.store import Store

KEY = "/configmaps"


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def make(i: int, ns: str = "default") -> dict[str, Any]:
    """A small but realistic object (~600 bytes of JSON)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{i:07d}",
            "namespace": ns,
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"app": f"app-{i % 50}", "tier": "backend", "isthmus.io/bench": "true"},
            "annotations": {"note": "x" * 64},
        },
        "data": {"key-a": "value-" * 10, "key-b": str(i), "key-c": "some longer configuration text " * 4},
    }


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s ({seconds / n * 1e6:.1f} µs each)"


def bench_writes(path: str | None, n: int) -> None:
    s = Store(path)
    s.open()
    label = "journal and sqlite" if path else "memory"
    objs = [make(i) for i in range(n)]
    # Process CPU, the journal's thread included, up to the last batch in SQLite (sync).
    t = time.process_time()
    for o in objs:
        s.create(KEY, o)
    s.sync()
    dt = time.process_time() - t
    print(f"create ({label}, {n}): {dt / n * 1e6:.1f} µs of CPU each")
    stored = s.list(KEY)
    t = time.process_time()
    for o in stored:
        s.update(KEY, o)
    s.sync()
    dt = time.process_time() - t
    print(f"update ({label}, {n}): {dt / n * 1e6:.1f} µs of CPU each")
    t = time.perf_counter()
    for i in range(n):
        s.get(KEY, "default", f"cm-{i:07d}")
    dt = time.perf_counter() - t
    print(f"get ({label}, {n}): {rate(n, dt)}")
    s.close()


def bench_list(n: int) -> None:
    s = Store(None)
    s.open()
    for i in range(n):
        s.create(KEY, make(i, ns=f"ns-{i % 10}"))
    t = time.perf_counter()
    s.list(KEY)
    cold = time.perf_counter() - t
    times = []
    for _ in range(20):
        t = time.perf_counter()
        s.list(KEY)
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    s.list(KEY, "ns-3")
    ns_dt = time.perf_counter() - t
    # A write between lists invalidates the cached list (the sorted key index survives).
    t = time.perf_counter()
    s.create(KEY, make(n + 1, ns="ns-5"))
    s.list(KEY)
    after_write = time.perf_counter() - t
    print(
        f"list of {n}: first {cold * 1e3:.2f} ms, cached {statistics.median(times) * 1e3:.3f} ms, "
        f"one namespace ({n // 10}) {ns_dt * 1e3:.2f} ms, create+list {after_write * 1e3:.2f} ms"
    )


def bench_reopen(path: str, n: int) -> None:
    s = Store(path)
    s.open()
    t = time.perf_counter()
    for i in range(n):
        s.create(KEY if i % 2 else "/secrets", make(i, ns=f"ns-{i % 20}"))
    rv = s.rv
    s.close()  # the journal's last batch goes into SQLite
    fill = time.perf_counter() - t
    size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    gc.collect()
    before = rss_kib()
    t = time.perf_counter()
    s2 = Store(path)
    s2.open()
    dt = time.perf_counter() - t
    after = rss_kib()
    assert s2.rv == rv and s2.count(KEY) + s2.count("/secrets") == n
    print(f"fill {n} objects (journal, then sqlite, close included): {rate(n, fill)}; db {size / 1e6:.1f} MB")
    print(f"reopen with {n} objects: {dt:.2f} s")
    print(f"RSS: {(after - before) / (n / 10_000) / 1024:.1f} MiB per 10k objects (loaded)")
    s2.close()


async def bench_watch(watchers: int, n: int) -> None:
    s = Store(None)
    s.open()
    ws = [s.watch(KEY, None, None) for _ in range(watchers)]
    lat: list[float] = []
    sent: dict[int, float] = {}

    async def consume(idx: int) -> None:
        got = 0
        async for ev in ws[idx]:
            lat.append(time.perf_counter() - sent[ev.rv])
            got += 1
            if got == n:
                return

    tasks = [asyncio.create_task(consume(i)) for i in range(watchers)]
    await asyncio.sleep(0)
    t = time.perf_counter()
    for i in range(n):
        rv = s.rv + 1
        sent[rv] = time.perf_counter()
        s.create(KEY, make(i))
        if i % 10 == 0:
            await asyncio.sleep(0)  # let consumers run, as the HTTP server would between requests
    await asyncio.gather(*tasks)
    dt = time.perf_counter() - t
    lat.sort()
    p99 = lat[int(len(lat) * 0.99)]
    print(
        f"watch fan-out: {n} creates to {watchers} watchers in {dt:.2f} s "
        f"({n / dt:,.0f} writes/s), delivery p50 {lat[len(lat) // 2] * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms"
    )
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--writes", type=int, default=20_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bench_writes(None, args.writes)
        bench_writes(os.path.join(d, "w.db"), args.writes)
        bench_list(10_000)
        asyncio.run(bench_watch(100, 5_000))
        bench_reopen(os.path.join(d, "r.db"), args.objects)


if __name__ == "__main__":
    main()
