"""Runtime benchmark: informer initial sync time and RSS for 10k and 50k objects, and the
reconcile throughput of a no-op controller over 10k keys.

    .venv/bin/python bench/runtime.py [--sizes 10000,50000] [--page-size 500]

Each size runs in fresh processes: an embedded apiserver (child) preloaded with N ConfigMaps,
and a measuring process (child) so its RSS figures are not mixed with the server's or with an
earlier size. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def configmap(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{i:06d}",
            "namespace": "default",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"app": f"app-{i % 100}", "tier": "bench"},
        },
        "data": {"config": "x" * 100, "index": str(i)},
    }


# ---- child: the apiserver -------------------------------------------------------------------


async def serve(n: int, data_dir: str) -> None:
    from isthmus.apiserver.server import ApiServer

    server = ApiServer(data_dir=data_dir)
    await server.start()
    t0 = time.perf_counter()
    for i in range(n):  # straight into the store: the bench measures the client side
        server.store.create("/configmaps", configmap(i))
    kubeconfig = str(Path(data_dir) / "kubeconfig")
    server.write_kubeconfig(kubeconfig)
    print(json.dumps({"kubeconfig": kubeconfig, "preload_s": time.perf_counter() - t0}), flush=True)
    await asyncio.Event().wait()


# ---- child: the measurements ----------------------------------------------------------------


async def measure(kubeconfig: str, n: int, page_size: int, reconcile: bool) -> dict[str, Any]:
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import ConfigMap

    from isthmus.runtime import Controller, Informer, Result

    client = AsyncClient(config=KubeConfig.from_file(kubeconfig), timeout=60)
    gc.collect()
    rss0 = rss_mb()
    inf: Informer[ConfigMap] = Informer(client, ConfigMap, page_size=page_size)
    t0 = time.perf_counter()
    inf.start()
    await inf.wait_synced()
    sync_s = time.perf_counter() - t0
    gc.collect()
    rss1 = rss_mb()
    out: dict[str, Any] = {
        "objects": len(inf.cache),
        "sync_s": sync_s,
        "rss_before_mb": rss0,
        "rss_after_mb": rss1,
        "rss_per_object_bytes": (rss1 - rss0) * 1024 * 1024 / max(1, len(inf.cache)),
    }
    assert len(inf.cache) >= n, (len(inf.cache), n)
    if reconcile:
        for workers in (1, 4):
            count = 0
            done = asyncio.Event()

            async def noop(key: str, done: asyncio.Event = done) -> Result | None:
                nonlocal count
                count += 1
                if count == n:
                    done.set()
                return None

            c = Controller(f"bench-noop-{workers}", noop, workers=workers)
            c.watch(inf)
            t1 = time.perf_counter()
            task = asyncio.create_task(c.run())
            await done.wait()
            elapsed = time.perf_counter() - t1
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            out[f"reconcile_{workers}w_keys_per_s"] = n / elapsed
            out[f"reconcile_{workers}w_s"] = elapsed
    await inf.stop()
    await client.close()
    return out


def representation_cost(n: int = 10_000) -> dict[str, float]:
    """Bytes per cached object: lightkube typed model (what the cache holds) vs plain dict."""
    from lightkube.core import decoders
    from lightkube.resources.core_v1 import ConfigMap

    raw = [orjson.dumps(configmap(i)) for i in range(n)]
    result = {}
    for name, decode in (
        ("typed_model", lambda b: decoders.decode_object(b, ConfigMap)),
        ("plain_dict", orjson.loads),
    ):
        gc.collect()
        tracemalloc.start()
        t0 = time.perf_counter()
        objs = [decode(b) for b in raw]
        dt = time.perf_counter() - t0
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result[f"{name}_bytes_per_object"] = size / n
        result[f"{name}_decode_us_per_object"] = dt / n * 1e6
        del objs
    return result


# ---- orchestration --------------------------------------------------------------------------


def run_size(n: int, page_size: int, reconcile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(n), tmp], stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout is not None
            info = json.loads(server.stdout.readline())
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--measure",
                    info["kubeconfig"],
                    str(n),
                    str(page_size),
                    str(int(reconcile)),
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=900,
            )
            result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
            result["server_preload_s"] = info["preload_s"]
            return result
        finally:
            server.terminate()  # the server process this bench started
            server.wait(timeout=30)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        asyncio.run(serve(int(sys.argv[2]), sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        kubeconfig, n, page, rec = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
        print(json.dumps(asyncio.run(measure(kubeconfig, n, page, rec))))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,50000")
    ap.add_argument("--page-size", type=int, default=500)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"isthmus.runtime bench (python {sys.version.split()[0]}, pid {os.getpid()})")
    cost = representation_cost()
    print(
        "cache representation, 10k ConfigMaps: typed model {typed_model_bytes_per_object:.0f} B/obj "
        "({typed_model_decode_us_per_object:.1f} us decode), plain dict {plain_dict_bytes_per_object:.0f} B/obj "
        "({plain_dict_decode_us_per_object:.1f} us decode)".format(**cost)
    )
    for n in sizes:
        r = run_size(n, args.page_size, reconcile=(n == min(sizes)))
        print(
            f"informer initial sync, {n} ConfigMaps (page {args.page_size}): {r['sync_s']:.2f} s "
            f"({n / r['sync_s']:.0f} obj/s); RSS {r['rss_before_mb']:.0f} -> {r['rss_after_mb']:.0f} MB "
            f"(+{r['rss_after_mb'] - r['rss_before_mb']:.0f} MB, {r['rss_per_object_bytes']:.0f} B/obj)"
        )
        for w in (1, 4):
            if f"reconcile_{w}w_s" in r:
                print(
                    f"no-op controller, {n} keys, {w} worker(s): {r[f'reconcile_{w}w_s']:.2f} s "
                    f"({r[f'reconcile_{w}w_keys_per_s']:.0f} reconciles/s)"
                )


if __name__ == "__main__":
    main()
