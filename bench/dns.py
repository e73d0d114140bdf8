"""DNS benchmark: `isthmus dns` vs NSD with dnsperf, same records, same query mix, one run.

    .venv/bin/python bench/dns.py [--quick] [--services 1000] [--seconds 10] [--rounds 3]

1. An embedded apiserver (child process, core 0) gets 1,000 ServiceImports as the agent writes
   them: 70% ClusterSetIP with a VIP, 20% ClusterSetIP without VIP (ClusterIPs of two clusters in
   imported EndpointSlices, answered round-robin), 10% headless (3 endpoints with hostnames).
2. One core: `isthmus dns` (1 worker) pinned to core 1 with taskset, in several variants: UDP
   batched (recvmmsg/sendmmsg, `--udp-batch 64`) and one datagram at a time (`--udp-batch 0`, the
   server before batching) on uvloop, and batched on asyncio's loop (ISTHMUS_EVENT_LOOP).
3. Its answers are dumped into a zone file for NSD (child, core 1, `server-count: 1`,
   `rrl-ratelimit: 0`, its own config/pid/zone files in a temp dir), so both serve the same records.
4. dnsperf (core 0) replays the same query file against each, rounds alternating between servers:
   60% A, 15% SRV, 15% AAAA (NODATA), 10% NXDOMAIN. Reported: queries/s, latency, loss, the ratio
   to NSD, and the server's CPU time per answered query (its process tree's schedstat), which
   noisy neighbours disturb far less than q/s.
5. Update latency: a ServiceImport's VIP is changed through the API; the time until `isthmus dns`
   answers the new VIP is measured (write sent → answer seen, and write acknowledged → answer seen).
6. All cores: `isthmus dns --workers <cores>` and NSD `server-count: <cores>`, nothing pinned,
   dnsperf with one thread per core.

`--quick`: 100 services, one 1.5 s round per server, the first of `--loops` only (under 30 s).

dnsperf and nsd come from Debian (`apt-get install -y dnsperf nsd`); when missing they are
installed here if running as root, otherwise the benchmark stops and says so. Only processes this
script started are stopped, by PID. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# This file is named dns.py, and its directory comes first on sys.path when run as a script:
# drop it so `import dns` finds dnspython, not this file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import dns.exception  # noqa: E402
import dns.message  # noqa: E402
import dns.query  # noqa: E402
import dns.rdatatype  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NS = "bench"
ZONE = "clusterset.local"
PY = sys.executable
ISTHMUS_CORE = "1"
CLIENT_CORE = "0"


# --- preparation ------------------------------------------------------------------------------------


def ensure_tools() -> None:
    missing = [t for t in ("dnsperf", "nsd") if shutil.which(t) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"missing {', '.join(missing)}: run `apt-get install -y dnsperf nsd` (needs root)")
    print(f"installing {', '.join(missing)} with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "dnsperf", "nsd"], check=True, env=env)
    # the package starts a system nsd on port 53; we never use it, and leave it alone


def free_port() -> int:
    """A port outside the ephemeral range (see isthmus.local.up.PORT_POOL), free on both UDP and TCP."""
    from isthmus.local.up import pick_port

    return pick_port(set(), udp=True)


def pinned(core: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", core, *argv] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else argv


class Children:
    """Processes this benchmark started; stopped by PID only."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        out = open(log, "wb")  # kept open for the child's lifetime
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen[bytes]) -> None:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_many(self, procs: list[subprocess.Popen[bytes]]) -> None:
        """SIGTERM them all, then wait for each (stopping one at a time adds up)."""
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            self.stop(p)

    def stop_all(self) -> None:
        self.stop_many(list(reversed(self.procs)))


# --- objects --------------------------------------------------------------------------------------


@dataclass
class Svc:
    name: str
    kind: str  # vip | novip | headless


def plan(n: int) -> list[Svc]:
    out = []
    for i in range(n):
        kind = "vip" if i % 10 < 7 else ("novip" if i % 10 < 9 else "headless")
        out.append(Svc(f"svc{i:04d}", kind))
    return out


async def populate(kubeconfig: Path, services: list[Svc], crds_installed: Callable[[], None] = lambda: None) -> None:
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Namespace
    from lightkube.resources.discovery_v1 import EndpointSlice
    from lightkube.types import PatchType

    from isthmus.api.mcs import (
        MANAGED_BY_LABEL,
        MANAGED_BY_VALUE,
        SERVICE_NAME_LABEL,
        SOURCE_CLUSTER_LABEL,
        ServiceImport,
    )
    from isthmus.kube.helpers import install_crds
    from isthmus.kube.resources import resource_for

    si_res = resource_for(ServiceImport)
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    try:
        await install_crds(client)
        await client.create(Namespace.from_dict({"metadata": {"name": NS}}))
        crds_installed()
        sem = asyncio.Semaphore(32)
        ports = [
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "grpc", "port": 9090, "protocol": "TCP"},
        ]

        def slice_(svc: str, cluster: str, eps: list[tuple[str, str | None]]) -> EndpointSlice:
            return EndpointSlice.from_dict(
                {
                    "metadata": {
                        "name": f"{svc}-{cluster}",
                        "namespace": NS,
                        "labels": {
                            SERVICE_NAME_LABEL: svc,
                            SOURCE_CLUSTER_LABEL: cluster,
                            MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": [
                        {"addresses": [ip], "conditions": {"ready": True}, **({"hostname": h} if h else {})}
                        for ip, h in eps
                    ],
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                }
            )

        async def one(i: int, s: Svc) -> None:
            async with sem:
                spec: dict[str, Any] = {
                    "type": "Headless" if s.kind == "headless" else "ClusterSetIP",
                    "ports": ports,
                }
                if s.kind == "vip":
                    spec["ips"] = [f"243.0.{i // 250}.{i % 250 + 1}"]
                clusters = ["c2", "c3"]
                obj = si_res.from_dict(
                    {
                        "apiVersion": ServiceImport.crd.api_version,
                        "kind": "ServiceImport",
                        "metadata": {"name": s.name, "namespace": NS},
                        "spec": spec,
                    }
                )
                await client.create(obj)
                status = {"status": {"clusters": [{"cluster": c} for c in clusters]}}
                await client.patch(si_res.Status, s.name, status, namespace=NS, patch_type=PatchType.MERGE)
                if s.kind == "novip":
                    for k, c in enumerate(clusters):
                        await client.create(
                            slice_(s.name, c, [(f"127.{100 + k}.{i // 250}.{i % 250 + 1}", None)])
                        )
                elif s.kind == "headless":
                    eps = [(f"127.{110 + j}.{i // 250}.{i % 250 + 1}", f"pod-{j}") for j in range(3)]
                    await client.create(slice_(s.name, "c2", eps))

        await asyncio.gather(*(one(i, s) for i, s in enumerate(services)))
    finally:
        await client.close()


# --- queries and zone -----------------------------------------------------------------------------


def fqdn(s: Svc) -> str:
    return f"{s.name}.{NS}.svc.{ZONE}"


def query_file(path: Path, services: list[Svc], count: int = 100_000) -> dict[str, int]:
    rnd = random.Random(1645)
    mix = {"A": 0, "SRV": 0, "AAAA": 0, "NX": 0}
    lines = []
    for _ in range(count):
        r = rnd.random()
        s = rnd.choice(services)
        if r < 0.60:
            lines.append(f"{fqdn(s)} A")
            mix["A"] += 1
        elif r < 0.75:
            lines.append(f"_http._tcp.{fqdn(s)} SRV")
            mix["SRV"] += 1
        elif r < 0.90:
            lines.append(f"{fqdn(s)} AAAA")
            mix["AAAA"] += 1
        else:
            lines.append(f"nx{rnd.randrange(10**6)}.{NS}.svc.{ZONE} A")
            mix["NX"] += 1
    path.write_text("\n".join(lines) + "\n")
    return mix


def ask(port: int, name: str, rdtype: str) -> dns.message.Message:
    return dns.query.udp(dns.message.make_query(name, rdtype), "127.0.0.1", port=port, timeout=2)


def zone_file(path: Path, port: int, services: list[Svc]) -> int:
    """The records `isthmus dns` serves for the benchmark's names, as a zone file for NSD."""
    lines = [
        f"$ORIGIN {ZONE}.",
        "$TTL 5",
        f"@ IN SOA ns.dns.{ZONE}. hostmaster.{ZONE}. 1 7200 1800 86400 5",
        f"@ IN NS ns.dns.{ZONE}.",
        "ns.dns IN A 127.0.0.1",
        'dns-version IN TXT "1.0.0"',
    ]
    records = 0
    names: list[tuple[str, str]] = []
    for s in services:
        names += [
            (fqdn(s), "A"),
            (f"_http._tcp.{fqdn(s)}", "SRV"),
            (f"_grpc._tcp.{fqdn(s)}", "SRV"),
            (fqdn(s), "SRV"),
        ]
        if s.kind == "headless":
            names += [(f"pod-{j}.c2.{fqdn(s)}", "A") for j in range(3)]
    with ThreadPoolExecutor(16) as pool:  # round trips, not CPU: overlap them
        answers = list(pool.map(lambda q: ask(port, *q), names))
    for (name, _), r in zip(names, answers, strict=True):
        for rrset in r.answer:
            for rr in rrset:
                lines.append(f"{name}. 5 IN {dns.rdatatype.to_text(rrset.rdtype)} {rr.to_text()}")
                records += 1
            if rrset.rdtype == dns.rdatatype.A:
                break  # a round-robin answer: one cluster's IP per query, as isthmus serves it
    path.write_text("\n".join(lines) + "\n")
    return records


def wait_answering(port: int, name: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            r = ask(port, name, "A")
            if r.rcode() == 0 and r.answer:
                return
        except (dns.exception.Timeout, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no answer for {name} on port {port}")


# --- dnsperf --------------------------------------------------------------------------------------


@dataclass
class Perf:
    sent: int
    completed: int
    lost: int
    qps: float
    avg_ms: float
    max_ms: float
    stddev_ms: float
    rcodes: str


def dnsperf(
    port: int, qfile: Path, seconds: float, outstanding: int, tmp: Path, label: str, *, core: str | None, threads: int
) -> Perf:
    argv = ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", str(qfile), "-l", str(seconds),
            "-q", str(outstanding), "-c", "4", "-t", "5", "-T", str(threads)]  # fmt: skip
    argv = pinned(core, argv) if core else argv
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    safe = re.sub(r"[^\w.-]+", "_", label)
    (tmp / f"dnsperf-{safe}.txt").write_text(out)

    def num(pattern: str) -> float:
        m = re.search(pattern, out)
        return float(m.group(1)) if m else float("nan")

    rcodes = re.search(r"Response codes:\s*(.*)", out)
    return Perf(
        sent=int(num(r"Queries sent:\s+(\d+)")),
        completed=int(num(r"Queries completed:\s+(\d+)")),
        lost=int(num(r"Queries lost:\s+(\d+)")),
        qps=num(r"Queries per second:\s+([\d.]+)"),
        avg_ms=num(r"Average Latency \(s\):\s+([\d.]+)") * 1000,
        max_ms=num(r"Average Latency \(s\):\s+[\d.]+ \(min [\d.]+, max ([\d.]+)\)") * 1000,
        stddev_ms=num(r"Latency StdDev \(s\):\s+([\d.]+)") * 1000,
        rcodes=rcodes.group(1).strip() if rcodes else "?",
    )


# --- update latency -------------------------------------------------------------------------------


async def update_latency(
    kubeconfig: Path, port: int, name: str, samples: int
) -> tuple[list[float], list[float]]:
    """Change the VIP of one ServiceImport `samples` times; time until the DNS answer follows."""
    from lightkube import AsyncClient, KubeConfig
    from lightkube.types import PatchType

    from isthmus.api.mcs import ServiceImport
    from isthmus.kube.resources import resource_for

    si_res = resource_for(ServiceImport)
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    from_send: list[float] = []
    from_ack: list[float] = []
    try:
        for k in range(samples):
            vip = f"243.1.{k // 250}.{k % 250 + 1}"
            want = socket.inet_aton(vip)
            t0 = time.perf_counter()
            task = loop.create_task(
                client.patch(si_res, name, {"spec": {"ips": [vip]}}, namespace=NS, patch_type=PatchType.MERGE)
            )
            t_ack: float | None = None
            query = dns.message.make_query(f"{name}.{NS}.svc.{ZONE}", "A").to_wire()
            while True:
                if t_ack is None and task.done():
                    task.result()
                    t_ack = time.perf_counter()
                sock.sendto(query, ("127.0.0.1", port))
                resp = await loop.sock_recv(sock, 4096)
                if resp.endswith(want):
                    t1 = time.perf_counter()
                    break
                await asyncio.sleep(0)
            await task
            if t_ack is None:
                t_ack = t1
            from_send.append((t1 - t0) * 1000)
            from_ack.append(max(0.0, (t1 - t_ack) * 1000))
            await asyncio.sleep(0.05)
    finally:
        sock.close()
        await client.close()
    return from_send, from_ack


# --- CPU accounting -----------------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (NSD forks its servers; `isthmus dns --workers` its workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process tree so far (schedstat: nanoseconds, not 10 ms ticks)."""
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:  # exited meanwhile
            pass
    return total / 1e9


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--outstanding", type=int, default=100, help="dnsperf -q")
    ap.add_argument("--rounds", type=int, default=3, help="alternating dnsperf rounds per server")
    ap.add_argument("--update-samples", type=int, default=20)
    ap.add_argument(
        "--udp-batches", default="64,0", help="isthmus --udp-batch values to run on one core (0: recvfrom/sendto)"
    )
    ap.add_argument("--loops", default="uvloop,asyncio", help="event loops to run isthmus on (batch: the first)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="all-cores run: --workers and NSD server-count")
    ap.add_argument("--quick", action="store_true", help="small and short (< 30 s in all)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, zone, dnsperf output)")
    args = ap.parse_args()
    if args.quick:
        args.services, args.seconds, args.rounds, args.update_samples = 100, 1.5, 1, 5
        args.loops = args.loops.split(",")[0]
    ensure_tools()
    tmp = Path(tempfile.mkdtemp(prefix="isthmus-bench-dns-"))
    kids = Children()
    try:
        run(args, tmp, kids)
    finally:
        kids.stop_all()
        if args.keep:
            print(f"(files kept in {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Server:
    label: str
    port: int
    proc: subprocess.Popen[bytes]
    runs: list[Perf]
    core: str | None = None
    """Pinned to this core (once answering)."""
    cpu: float = 0.0
    """Server CPU seconds over the measured rounds."""


def nsd_conf(tmp: Path, name: str, port: int, count: int, zone: Path) -> Path:
    d = tmp / name
    d.mkdir()
    conf = d / "nsd.conf"
    conf.write_text(
        f"""server:
    ip-address: 127.0.0.1@{port}
    port: {port}
    server-count: {count}
    username: ""
    chroot: ""
    zonesdir: "{d}"
    pidfile: "{d}/nsd.pid"
    database: ""
    zonelistfile: "{d}/zone.list"
    xfrdfile: "{d}/xfrd.state"
    xfrdir: "{d}"
    logfile: "{d}/nsd.log"
    verbosity: 0
    do-ip6: no
    hide-version: yes
    rrl-ratelimit: 0
remote-control:
    control-enable: no
zone:
    name: {ZONE}
    zonefile: "{zone}"
"""
    )
    return conf


def isthmus_dns(
    kids: Children, tmp: Path, kubeconfig: Path, label: str, *, core: str | None, loop: str, batch: int, workers: int
) -> Server:
    port = free_port()
    argv = [PY, "-m", "isthmus", "dns", "--kubeconfig", str(kubeconfig), "--cluster-id", "c1",
            "--listen", f"127.0.0.1:{port}", "--log-level", "warning", "--udp-batch", str(batch),
            "--workers", str(workers)]  # fmt: skip
    env = {**os.environ, "ISTHMUS_EVENT_LOOP": loop}
    safe = re.sub(r"[^\w.-]+", "_", label)
    proc = kids.start(argv, tmp / f"{safe}.log", env=env)  # pinned once answering: start-up on all cores
    return Server(label, port, proc, [], core)


def pin(server: Server) -> None:
    """Every thread of the server's process to its core (what taskset -a -p does)."""
    if server.core is None or not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        return
    for tid in os.listdir(f"/proc/{server.proc.pid}/task"):
        os.sched_setaffinity(int(tid), {int(server.core)})


def measure(
    servers: list[Server], args: argparse.Namespace, qfile: Path, tmp: Path, *, core: str | None, threads: int
) -> None:
    """Alternate the servers over the rounds so a noisy neighbour hurts them alike; CPU per server."""
    warm = 0.5 if args.quick else 2.0
    for s in servers:
        dnsperf(s.port, qfile, warm, args.outstanding, tmp, f"{s.label}-warmup", core=core, threads=threads)
    for rnd in range(args.rounds):
        for s in servers:
            c0 = cpu_seconds(s.proc.pid)
            s.runs.append(dnsperf(s.port, qfile, args.seconds, args.outstanding, tmp, f"{s.label}-{rnd}", core=core, threads=threads))
            s.cpu += cpu_seconds(s.proc.pid) - c0


def report(title: str, servers: list[Server], ref: Server, target: str) -> None:
    print()
    print(title)
    print(
        f"{'server':<34}{'q/s':>10}{'avg ms':>9}{'sd ms':>8}{'sent':>10}{'lost':>7}{'µs CPU/q':>10}{'ratio':>7}  rounds q/s"
    )
    for s in servers:
        p = _median_run(s.runs)
        done = sum(r.completed for r in s.runs)
        us = s.cpu / done * 1e6 if done else float("nan")
        ratio = p.qps / _median_run(ref.runs).qps if s is not ref else 1.0
        rounds = ", ".join(f"{r.qps:,.0f}" for r in s.runs)
        print(
            f"{s.label:<34}{p.qps:>10,.0f}{p.avg_ms:>9.3f}{p.stddev_ms:>8.3f}{p.sent:>10}"
            f"{sum(r.lost for r in s.runs):>7}{us:>10.2f}{ratio:>7.2f}  {rounds}"
        )
    print(f"  ratio = q/s / {ref.label}'s (median rounds); lost = all rounds; {target}")


def run(args: argparse.Namespace, tmp: Path, kids: Children) -> None:
    from isthmus.runtime.loop import loop_name

    t_start = time.monotonic()
    lap = [t_start]

    def mark(what: str) -> None:
        if os.environ.get("BENCH_LAPS"):
            print(f"  [{what}: {time.monotonic() - lap[0]:.1f}s]", flush=True)
        lap[0] = time.monotonic()

    services = plan(args.services)
    api_port = free_port()
    api = kids.start(
        pinned(CLIENT_CORE, [PY, "-c", "from isthmus.cli.main import app; app()", "apiserver",
                             "--port", str(api_port), "--data-dir", str(tmp / "api"), "--log-level", "warning"]),
        tmp / "apiserver.log",
    )  # fmt: skip
    kubeconfig = tmp / "api" / "kubeconfig"
    end = time.monotonic() + 30
    while not kubeconfig.exists():
        if api.poll() is not None or time.monotonic() > end:
            sys.exit(f"apiserver did not start; see {tmp / 'apiserver.log'}")
        time.sleep(0.1)
    mark("apiserver start")

    # One core: every isthmus variant and NSD pinned to ISTHMUS_CORE, dnsperf to CLIENT_CORE.
    batches = [int(b) for b in args.udp_batches.split(",") if b.strip()]
    loops = [loop_name(x.strip()) for x in args.loops.split(",") if x.strip()]
    n = args.workers
    one: list[Server] = []
    multi: list[Server] = []

    def start_servers() -> None:
        """Started once the CRDs exist, so their start-up overlaps the writes; idle until measured."""
        for loop in loops:
            for batch in batches if loop == loops[0] else batches[:1]:
                io = f"mmsg x{batch}" if batch else "recvfrom/sendto"
                one.append(isthmus_dns(kids, tmp, kubeconfig, f"isthmus {loop} {io}", core=ISTHMUS_CORE,
                                       loop=loop, batch=batch, workers=1))  # fmt: skip
        multi.append(isthmus_dns(kids, tmp, kubeconfig, f"isthmus {loops[0]} --workers {n}", core=None,
                                 loop=loops[0], batch=batches[0], workers=n))  # fmt: skip

    t = time.monotonic()
    asyncio.run(populate(kubeconfig, services, start_servers))
    print(f"apiserver: {len(services)} ServiceImports written in {time.monotonic() - t:.1f}s", flush=True)
    t = time.monotonic()
    for s in one:
        wait_answering(s.port, fqdn(services[-1]), s.proc)
        pin(s)
    print(f"isthmus dns x{len(one)}: all answering {time.monotonic() - t:.2f}s after the writes", flush=True)

    mark("isthmus start")
    qfile = tmp / "queries.txt"
    mix = query_file(qfile, services)
    zone = tmp / f"{ZONE}.zone"
    records = zone_file(zone, one[0].port, services)
    mark("zone file")
    nsd_bin = shutil.which("nsd") or "/usr/sbin/nsd"
    nsd_port = free_port()
    conf = nsd_conf(tmp, "nsd1", nsd_port, 1, zone)
    nsd = Server("nsd (server-count 1)", nsd_port, kids.start(pinned(ISTHMUS_CORE, [nsd_bin, "-d", "-c", str(conf)]), tmp / "nsd1.out"), [])
    nsd_n_port = free_port()  # started now, idle until measured (its start-up overlaps)
    conf = nsd_conf(tmp, "nsdN", nsd_n_port, n, zone)
    nsd_n = Server(f"nsd (server-count {n})", nsd_n_port, kids.start([nsd_bin, "-d", "-c", str(conf)], tmp / "nsdN.out"), [])
    wait_answering(nsd_port, fqdn(services[-1]), nsd.proc)
    print(f"nsd: serving the same {records} records (+ SOA/NS), rrl-ratelimit 0", flush=True)
    print(f"query mix ({sum(mix.values())} queries, looped): {mix}", flush=True)
    mark("setup")
    measure([*one, nsd], args, qfile, tmp, core=CLIENT_CORE, threads=1)
    mark("one core")
    samples_send, samples_ack = asyncio.run(
        update_latency(kubeconfig, one[0].port, services[0].name, args.update_samples)
    )
    rss = _rss_mb(one[0].proc.pid)

    # All cores: --workers N and NSD server-count N, nothing pinned (dnsperf shares the cores).
    wait_answering(multi[0].port, fqdn(services[-1]), multi[0].proc)
    wait_answering(nsd_n.port, fqdn(services[-1]), nsd_n.proc)
    mark("update latency")
    measure([multi[0], nsd_n], args, qfile, tmp, core=None, threads=min(n, 4))
    mark("all cores")

    print()
    print(
        f"dnsperf: {args.rounds} alternating round(s) of {args.seconds}s per server (median shown), "
        f"{args.outstanding} outstanding, 4 sockets; {len(services)} services; {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; isthmus event loop as labelled (ISTHMUS_EVENT_LOOP)"
    )
    report(
        f"one core (servers on core {ISTHMUS_CORE}, dnsperf on core {CLIENT_CORE}, 1 worker):",
        [*one, nsd], nsd, "target: isthmus >= 0.8 x NSD, 0 lost",
    )
    report(
        f"all cores (isthmus --workers {n}, NSD server-count {n}, nothing pinned, dnsperf -T {min(n, 4)}):",
        [multi[0], nsd_n], nsd_n, "the client shares the cores, so both are capped by it",
    )
    print(f"isthmus dns RSS (1 worker): {rss:.0f} MB")
    print(
        f"update latency (ServiceImport VIP change → new answer, {len(samples_send)} samples): "
        f"from write sent median {statistics.median(samples_send):.1f} ms, p95 {_p95(samples_send):.1f} ms; "
        f"from write acknowledged median {statistics.median(samples_ack):.2f} ms, p95 {_p95(samples_ack):.2f} ms"
    )
    print(f"(benchmark took {time.monotonic() - t_start:.0f}s)")


def _median_run(runs: list[Perf]) -> Perf:
    return sorted(runs, key=lambda p: p.qps)[len(runs) // 2]


def _p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    main()
