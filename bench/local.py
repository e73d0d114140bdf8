"""Benchmark of the local clusterset: `isthmus up --detach` to ready, and what it costs in memory.

Prints: wall time of `isthmus up --clusters N --detach` (it returns once every part answers
/readyz), the RSS and PSS of the whole clusterset (the supervisor and every process below it:
parts, zygotes, pods) idle, then after
exporting S services from c1 (with a ClusterSet IP) once every other cluster has imported them
(bounded wait), and the time `isthmus down` takes. A fresh temp state dir; 127.0.0.1 only.

Both runtimes in one run, side by side (`--runtimes process,runc`): process pods on 127.0.0.0/8,
and runc mode (every pod a container of the images built here, a network namespace per pod); the
runc images are built (or found in their cache) before its `up` is timed.

Usage: python bench/local.py [--clusters N] [--services S] [--timeout SECONDS] [--runtimes LIST] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Service

from isthmus.api.mcs import MCS_GROUP, MCS_VERSION
from isthmus.kube.client import make_client

ISTHMUS = [sys.executable, "-m", "isthmus"]
SvcExport = create_namespaced_resource(MCS_GROUP, MCS_VERSION, "ServiceExport", "serviceexports")
SvcImport = create_namespaced_resource(MCS_GROUP, MCS_VERSION, "ServiceImport", "serviceimports")


def rss_pss_mb(pid: int) -> tuple[float, float]:
    """RSS and PSS (shared pages divided among the processes sharing them), MB; 0 if gone."""
    rss = pss = 0.0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, pss


def status(root: Path) -> dict[str, Any]:
    out = subprocess.run([*ISTHMUS, "status", "--state-dir", str(root), "-o", "json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (the parts, the zygotes they were forked from, the pods)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children[int(stat[stat.rindex(")") + 2:].split()[1])].append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_of(pid: int) -> float:
    """CPU time of `pid` and of the children it reaped (one-shot commands, kubectl, exits)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def kinds_of(doc: dict[str, Any]) -> dict[int, str]:
    """Every process of the clusterset (the supervisor and everything below it) → its kind of part
    ("zygote", "supervisor", "other" for the rest)."""
    kinds: dict[int, str] = {}
    for owner in [doc["broker"], *doc["clusters"]]:
        for kind, proc in owner["processes"].items():
            if proc["pid"]:
                kinds[proc["pid"]] = kind
    sup = doc["supervisor"]["pid"]
    out = {}
    for pid in descendants(sup) if sup else list(kinds):
        try:
            zygote = b"isthmus.procs.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            zygote = False
        out[pid] = kinds.get(pid) or ("zygote" if zygote else "supervisor" if pid == sup else "other")
    return out


def memory(root: Path) -> tuple[int, float, float, dict[str, float]]:
    """Processes, total RSS and PSS (MB) over the supervisor and everything below it (parts,
    zygotes, pods), and PSS per kind of part (RSS counts the zygote's shared pages in full in every
    forked process: about 100 MB each whatever the process does)."""
    kinds = kinds_of(status(root))
    by_kind: dict[str, list[float]] = collections.defaultdict(list)
    sizes = []
    for pid, kind in kinds.items():
        size = rss_pss_mb(pid)
        sizes.append(size)
        by_kind[kind].append(size[1])
    return (len(kinds), sum(r for r, _ in sizes), sum(p for _, p in sizes),
            {k: sum(v) / len(v) for k, v in by_kind.items()})


def show_memory(label: str, root: Path) -> None:
    n, rss, pss, kinds = memory(root)
    per = ", ".join(f"{k} {v:.0f}" for k, v in sorted(kinds.items()))
    print(f"memory {label}: {n} processes, RSS {rss:.0f} MB, PSS {pss:.0f} MB (mean PSS per process, MB: {per})")


async def export_services(root: Path, clusters: list[str], n: int, within: float) -> float:
    """Create n Services + ServiceExports in c1; seconds until every other cluster imported all."""
    c1 = make_client(root / "kubeconfigs" / "c1.yaml")
    others = {c: make_client(root / "kubeconfigs" / f"{c}.yaml") for c in clusters[1:]}
    try:
        for client in [c1, *others.values()]:
            await client.create(Namespace(metadata=ObjectMeta(name="bulk")))
        limit = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with limit:
                await c1.create(Service(metadata=ObjectMeta(name=f"svc-{i}", namespace="bulk"),
                                        spec=ServiceSpec(selector={"app": f"a{i}"},
                                                         ports=[ServicePort(name="http", port=80)])))
                await c1.create(SvcExport(metadata=ObjectMeta(
                    name=f"svc-{i}", namespace="bulk",
                    annotations={"lighthouse.submariner.io/use-clusterset-ip": "true"})))

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(n)))
        print(f"created {n} Services + ServiceExports in c1 in {time.monotonic() - started:.1f}s")
        deadline = started + within
        while time.monotonic() < deadline:
            counts = {}
            for name, client in others.items():
                counts[name] = len([item async for item in client.list(SvcImport, namespace="bulk")])
            if all(c >= n for c in counts.values()):
                return time.monotonic() - started
            await asyncio.sleep(1.0)
        raise TimeoutError(f"not converged within {within:.0f}s: {counts}")
    finally:
        for client in [c1, *others.values()]:
            await client.close()


TARGETS = {"process": (10.0, 800.0), "runc": (30.0, 2500.0)}
"""Per runtime, 3 clusters: (seconds to ready, idle PSS MB) — issue 42's targets on this machine."""


def one_runtime(runtime: str, args: argparse.Namespace) -> dict[str, float]:
    """`up` to ready, CPU, idle memory (and exports) of one runtime on a fresh state dir; its figures."""
    tmp = Path(tempfile.mkdtemp(prefix="isthmus-bench-local-"))
    root = tmp / "state"
    out: dict[str, float] = {}
    try:
        if runtime == "runc":  # the images are built (or found cached) first: `up` to ready is measured alone
            subprocess.run([sys.executable, "-m", "isthmus.local.images.build"], check=True, timeout=1800,
                           stdout=subprocess.DEVNULL)
        started = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([*ISTHMUS, "up", "--clusters", str(args.clusters), "--detach", "--state-dir", str(root),
                        "--enable-clusterset-ip", "--runtime", runtime], check=True, timeout=600,
                       stdout=subprocess.DEVNULL)
        took = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_by_kind: dict[str, float] = collections.defaultdict(float)
        for pid, kind in kinds_of(status(root)).items():
            cpu_by_kind[kind] += cpu_of(pid)
        cpu_by_kind["up command"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        cpu = sum(cpu_by_kind.values())
        target = TARGETS[runtime][0]
        print(f"[{runtime}] isthmus up --clusters {args.clusters} --detach: ready in {took:.1f}s (target ≤ {target:.0f} s "
              f"for 3 clusters), {cpu:.1f} CPU-s spent getting there (every process of the clusterset and the up command)")
        print(f"[{runtime}]   CPU-s by part (all clusters; the supervisor counts its one-shot commands and kubectl): "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu_by_kind.items(), key=lambda kv: -kv[1])))
        out.update(ready=took, cpu=cpu)
        time.sleep(3 if args.quick else 10)
        n, _, pss, _ = memory(root)
        out.update(processes=n, pss=pss)
        show_memory(f"[{runtime}] idle", root)
        clusters = [c["name"] for c in status(root)["clusters"]]
        if len(clusters) > 1 and args.services:
            took = asyncio.run(export_services(root, clusters, args.services, args.timeout))
            print(f"[{runtime}] {args.services} exported services imported into {', '.join(clusters[1:])} in {took:.1f}s")
            out["exports"] = took
            show_memory(f"[{runtime}] after exporting {args.services} services", root)
        started = time.monotonic()
        subprocess.run([*ISTHMUS, "down", "--state-dir", str(root)], check=True, timeout=120, stdout=subprocess.DEVNULL)
        out["down"] = time.monotonic() - started
        print(f"[{runtime}] isthmus down: {out['down']:.1f}s")
    finally:
        subprocess.run([*ISTHMUS, "down", "--state-dir", str(root)], timeout=120, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=3)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=300.0, help="bound on the export convergence wait")
    ap.add_argument("--runtimes", default="process,runc",
                    help="comma-separated: each is measured in turn and the figures printed side by side "
                         "(runc needs root and the Debian packages `make install` installs)")
    ap.add_argument("--quick", action="store_true", help="100 services, a shorter idle wait")
    args = ap.parse_args()
    if args.quick:
        args.services = min(args.services, 100)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    results = {r: one_runtime(r, args) for r in runtimes}
    print()
    print(f"{'':28}" + "".join(f"{r:>14}" for r in runtimes))
    rows = [("up to ready (s)", "ready", "{:.1f}"), ("CPU-s to ready", "cpu", "{:.1f}"),
            ("processes idle", "processes", "{:.0f}"), ("PSS idle (MB)", "pss", "{:.0f}"),
            (f"{args.services} exports imported (s)", "exports", "{:.1f}"), ("down (s)", "down", "{:.1f}")]
    for label, key, fmt in rows:
        print(f"{label:28}" + "".join(f"{fmt.format(results[r][key]) if key in results[r] else '-':>14}"
                                      for r in runtimes))
    print(f"{'targets (3 clusters)':28}" + "".join(f"{'≤{:.0f}s ≤{:.0f}MB'.format(*TARGETS[r]):>14}" for r in runtimes))


if __name__ == "__main__":
    main()
