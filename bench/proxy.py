"""Proxy benchmark: small HTTP requests through `isthmus proxy` (ClusterIP and VIP) vs straight to the backend.

    .venv/bin/python bench/proxy.py [--quick] [--loop both|uvloop|asyncio] [--mode both|userspace|nftables]
        [--requests 20000] [--new-conn-requests 4000] [--concurrency 8] [--rounds 3] [--bulk-mib 256] [--no-haproxy]

1. A fast backend (child process: a bare asyncio Protocol answering every GET with a fixed 2-byte
   body) listens on 127.210.0.1:18080.
2. An embedded apiserver (child) gets a Service with ClusterIP 127.211.0.10:8000, its EndpointSlice
   pointing at the backend, and a ServiceImport with VIP 127.212.0.5:8000 exported by this cluster.
3. `isthmus proxy --cluster-id c1` (child, the real CLI) makes both reachable.
4. The client (this process; asyncio, `--concurrency` connections) sends a bounded number of
   requests to each target, in two variants: keep-alive (requests back to back on open
   connections) and new connection per request (`Connection: close`). The same client drives
   direct and proxied; targets alternate in `--rounds` short rounds so load from elsewhere on the
   machine hits them alike. Reported: requests/s, p50 and p99 latency, the proxy/direct ratios,
   and CPU per request of the proxy, the backend and the client (from /proc/<pid>/task/*/schedstat,
   ns resolution): on a shared machine CPU per request is the steadier figure. Then bulk: one
   connection per target streams `--bulk-mib` MiB from the backend (port 18081, proxied on 8001):
   MiB/s and CPU per MiB.
5. Steps 3-4 run once per event loop the proxy is asked to use (`ISTHMUS_EVENT_LOOP` in its
   environment); the backend and the client stay on asyncio's loop, so only the proxy changes.
   With `--mode nftables` (or `both`, the default when this runs as root with `nft` installed)
   they also run once with `isthmus proxy --mode nftables`: the kernel translates, so the proxy
   process itself spends nothing per request and the NAT's cost lands in the client's and the
   backend's CPU (softirq). Then the whole benchmark runs in a network namespace of its own
   (`unshare --net`), so the rules never touch the host's and vanish with it.
6. Where `haproxy` is installed, it relays the same hop as a reference (TCP mode, one thread, on
   127.213.0.1:8000): what a userspace proxy written in C costs on this machine, measured in the
   same rounds. `--no-haproxy` leaves it out.

Only processes this script started are stopped, by PID. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
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
HAPROXY = ("127.213.0.1", 8000)
SOURCES = {"direct": "127.214.0.1", "ClusterIP": "127.214.0.2", "VIP": "127.214.0.3", "HAProxy": "127.214.0.4"}
"""The client's address toward each target (see `new_connections`)."""
BULK_PORT = 8001
"""Each address above also serves a bulk port: the backend streams the bytes a client asks for."""
BULK_BACKEND_PORT = 18081
HAPROXY_CFG = f"""global
    nbthread 1
    maxconn 4096
defaults
    mode tcp
    timeout connect 2s
    timeout client 30s
    timeout server 30s
listen bench
    bind {HAPROXY[0]}:{HAPROXY[1]}
    server backend {BACKEND[0]}:{BACKEND[1]}
listen bulk
    bind {HAPROXY[0]}:{BULK_PORT}
    server backend {BACKEND[0]}:{BULK_BACKEND_PORT}
"""
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


async def _bulk_source(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Streams the number of bytes asked for on the first line, then closes."""
    left = int(await reader.readline())
    chunk = b"\x5a" * (1 << 20)
    while left > 0:
        writer.write(chunk[: min(left, len(chunk))])
        left -= len(chunk)
        await writer.drain()
    writer.close()


async def run_backend() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Http, *BACKEND, reuse_address=True, backlog=4096)
    bulk = await asyncio.start_server(_bulk_source, BACKEND[0], BULK_BACKEND_PORT, reuse_address=True)
    print("READY", flush=True)
    async with server, bulk:
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
    ports = [
        {"name": "http", "port": CLUSTER_IP[1], "targetPort": BACKEND[1], "protocol": "TCP"},
        {"name": "bulk", "port": BULK_PORT, "targetPort": BULK_BACKEND_PORT, "protocol": "TCP"},
    ]
    await client.create(
        Service.from_dict(
            {
                "metadata": {"name": "web", "namespace": NS},
                "spec": {"clusterIP": CLUSTER_IP[0], "clusterIPs": [CLUSTER_IP[0]], "ports": ports},
            }
        )
    )
    await client.create(
        EndpointSlice.from_dict(
            {
                "metadata": {"name": "web-x", "namespace": NS, "labels": {KUBE_SERVICE_NAME_LABEL: "web"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [BACKEND[0]], "conditions": {"ready": True}}],
                "ports": [
                    {"name": "http", "port": BACKEND[1], "protocol": "TCP"},
                    {"name": "bulk", "port": BULK_BACKEND_PORT, "protocol": "TCP"},
                ],
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
                    "ports": [
                        {"name": "http", "port": VIP[1], "protocol": "TCP"},
                        {"name": "bulk", "port": BULK_PORT, "protocol": "TCP"},
                    ],
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


async def keep_alive(addr: tuple[str, int], n: int, concurrency: int, source: str | None = None) -> list[int]:
    loop = asyncio.get_running_loop()
    latencies: list[int] = []
    left = n

    async def worker() -> None:
        nonlocal left
        transport, proto = await loop.create_connection(_KeepAlive, *addr, local_addr=(source, 0) if source else None)
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


async def new_connections(addr: tuple[str, int], n: int, concurrency: int, source: str | None = None) -> list[int]:
    """`source`: the client address (each target gets its own: a backend still holding TIME_WAIT for a
    direct connection from client:port would otherwise meet a translated SYN from the same client:port
    to a virtual address — a collision of this benchmark's alternation, not of the dataplane)."""
    latencies: list[int] = []
    local = (source, 0) if source else None
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter_ns()
            reader, writer = await asyncio.open_connection(*addr, local_addr=local)
            writer.write(CLOSE_REQUEST)
            body = await reader.read()
            writer.close()
            if not body.endswith(b"ok"):
                raise RuntimeError(f"bad answer {body!r}")
            latencies.append(time.perf_counter_ns() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


class _Sink(asyncio.BufferedProtocol):
    """Counts what arrives until EOF, reading into one buffer (the client's cost stays small)."""

    def __init__(self, done: asyncio.Future[int]) -> None:
        self.buf = memoryview(bytearray(256 * 1024))
        self.got = 0
        self.done = done

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        self.got += nbytes

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.got)


async def bulk(host: str, nbytes: int) -> int:
    """One connection to `host`'s bulk port, `nbytes` streamed back; what arrived."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    transport, _ = await loop.create_connection(
        lambda: _Sink(done), host, BULK_PORT if host != BACKEND[0] else BULK_BACKEND_PORT
    )
    transport.write(f"{nbytes}\n".encode())
    got = await done
    transport.close()
    if got != nbytes:
        raise RuntimeError(f"bulk: {got} of {nbytes} bytes")
    return got


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


def cpu_ns(pid: int) -> int:
    """CPU time (user + system) of every thread of `pid`, in ns."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total


class Child:
    """A child process; stderr goes to a file (a pipe nobody reads would fill and stall it)."""

    def __init__(self, what: str, args: list[str], env: dict[str, str], logdir: Path) -> None:
        self.what = what
        self.log = logdir / f"{what}.log"
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, env=env
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            raise SystemExit(f"{self.what} failed to start: {line}{self.tail()}")

    def tail(self) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-20:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20000, help="keep-alive requests per target")
    ap.add_argument("--new-conn-requests", type=int, default=4000, help="new-connection requests per target")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument(
        "--bulk-mib", type=int, default=256, help="MiB streamed through each target in one connection"
    )
    ap.add_argument("--rounds", type=int, default=3, help="alternate the targets this many times")
    ap.add_argument(
        "--loop", choices=["both", "uvloop", "asyncio"], default="both", help="the proxy's event loop"
    )
    ap.add_argument("--mode", choices=["both", "userspace", "nftables"], default=None,
                    help="the proxy's dataplane (default: both where root and nft allow it, else userspace)")
    ap.add_argument("--socket-lb", choices=["both", "on", "off"], default="both",
                    help="userspace mode: with connect-time balancing (the default), without it (the listeners "
                         "relay every connection), or both")
    ap.add_argument("--kernel-splice", choices=["both", "on", "off"], default=None,
                    help="userspace mode: with the kernel splice of connections past their second client read, "
                         "relaying every byte in the proxy (the default), or both (default without --quick)")
    ap.add_argument("--quick", action="store_true", help="small sizes, VIP only (< 30 s)")
    ap.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-haproxy", action="store_true", help="no HAProxy reference figure")
    ap.add_argument("--role", choices=["backend", "cluster"], help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "backend":
        asyncio.run(run_backend())
        return
    if a.role == "cluster":
        asyncio.run(run_cluster(Path(a.state)))
        return
    if a.quick:
        a.requests, a.new_conn_requests, a.rounds = min(a.requests, 3000), min(a.new_conn_requests, 600), 1
        a.bulk_mib = min(a.bulk_mib, 32)
    kernel_ok = os.geteuid() == 0 and shutil.which("nft") is not None and shutil.which("unshare") is not None
    if a.mode is None:
        a.mode = "both" if kernel_ok else "userspace"
        if not kernel_ok:
            print("note: not root or no nft/unshare: the nftables mode is not measured")
    if a.mode != "userspace" and not a.in_netns:
        if not kernel_ok:
            raise SystemExit("--mode nftables needs root, nft and unshare")
        # A network namespace of our own: the proxy's rules are programmed there and go with it.
        argv = [PY, __file__, *sys.argv[1:], "--in-netns"]
        raise SystemExit(subprocess.call(["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"',
                                          "sh", *argv]))
    loops = ["uvloop", "asyncio"] if a.loop == "both" else [a.loop]
    splices = {"both": [False, True], "on": [True], "off": [False]}[a.kernel_splice or ("off" if a.quick else "both")]
    lbs = {"both": [True, False], "on": [True], "off": [False]}[a.socket_lb]
    variants = [
        (f"{loops[0]}-socketlb", loops[0], "userspace", False, True)  # the kernel balances: no loop involved
    ] * (True in lbs) + [
        (f"{loop}-splice" if spliced else loop, loop, "userspace", spliced, False)
        for loop in loops for spliced in splices if False in lbs
    ] if a.mode != "nftables" else []
    if a.mode != "userspace":
        variants.append(("nftables", "uvloop", "nftables", False, False))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the children too (finally below)

    # This checkout's source unless PYTHONPATH names one (to compare two versions of the proxy).
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT / "src")}
    children: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="isthmus-bench-proxy-") as tmp:
        try:
            backend = Child("backend", [PY, __file__, "--role", "backend"], env, Path(tmp))
            children.append(backend)
            backend.wait_ready()
            cluster = Child("apiserver", [PY, __file__, "--role", "cluster", "--state", tmp], env, Path(tmp))
            children.append(cluster)
            cluster.wait_ready()
            haproxy_pid = None
            if not a.no_haproxy and shutil.which("haproxy"):
                cfg = Path(tmp) / "haproxy.cfg"
                cfg.write_text(HAPROXY_CFG)
                ha = Child("haproxy", ["haproxy", "-db", "-f", str(cfg)], env, Path(tmp))
                children.append(ha)
                haproxy_pid = ha.pid
            print(
                f"isthmus proxy benchmark: {os.cpu_count()} CPUs, concurrency {a.concurrency}, "
                f"{a.requests} keep-alive / {a.new_conn_requests} new-connection requests per target "
                f"in {a.rounds} round(s); backend and client on asyncio"
            )
            summary: list[str] = []
            for label, loop, mode, spliced, socket_lb in variants:
                cli = "import isthmus.cli.main, isthmus.cli.proxy; from isthmus.cli.app import app; app(prog_name='isthmus')"
                proxy = Child(
                    f"proxy-{label}",
                    [PY, "-c", cli, "proxy", "--kubeconfig", f"{tmp}/kubeconfig", "--cluster-id", "c1",
                     "--log-level", "warning", "--mode", mode,
                     "--kernel-splice" if spliced else "--no-kernel-splice",
                     "--socket-lb" if socket_lb else "--no-socket-lb"],
                    {**env, "ISTHMUS_EVENT_LOOP": loop},
                    Path(tmp),
                )  # fmt: skip
                children.append(proxy)
                try:
                    summary += asyncio.run(_bench(a, label, proxy.pid, backend.pid, haproxy_pid))
                except BaseException:
                    print(f"proxy ({label}) log:\n{proxy.tail()}", file=sys.stderr)
                    raise
                finally:
                    proxy.stop()
            print("\nsummary (proxied / direct, same run):")
            for line in summary:
                print(f"  {line}")
        finally:
            for c in reversed(children):
                c.stop()


async def _bench(a: Any, loop: str, proxy_pid: int, backend_pid: int, haproxy_pid: int | None) -> list[str]:
    await wait_http(CLUSTER_IP)
    await wait_http(VIP)
    names = ["direct", "VIP"] if a.quick else ["direct", "ClusterIP", "VIP"]
    # target → (address, the pid of the proxy in the path; 0: none)
    targets = {
        name: ({"direct": BACKEND, "ClusterIP": CLUSTER_IP, "VIP": VIP}[name], proxy_pid) for name in names
    }
    targets["direct"] = (BACKEND, 0)
    if haproxy_pid is not None:
        await wait_http(HAPROXY)
        targets["HAProxy"] = (HAPROXY, haproxy_pid)
    if loop == "nftables":
        print("\nproxy: nftables")
    else:
        what = ("connect-time balancing" if loop.endswith("-socketlb") else
                "kernel splice" if loop.endswith("-splice") else "every byte relayed by the proxy")
        print(f"\nproxy: userspace ({what}), event loop {loop.split('-')[0]}")
    summary = []
    for kind, n in (("keep-alive", a.requests), ("new-conn", a.new_conn_requests)):
        run = keep_alive if kind == "keep-alive" else new_connections
        per_round = max(1, n // a.rounds)
        lat: dict[str, list[int]] = {name: [] for name in targets}
        secs = dict.fromkeys(targets, 0.0)
        cpu = {name: {"proxy": 0, "backend": 0, "client": 0} for name in targets}
        for name, (addr, _) in targets.items():
            await run(addr, max(200, per_round // 10), a.concurrency, SOURCES[name])  # warm-up
        for _ in range(a.rounds):
            for name, (addr, pid) in targets.items():
                before = (cpu_ns(pid) if pid else 0, cpu_ns(backend_pid), time.process_time_ns())
                t0 = time.perf_counter()
                lat[name] += await run(addr, per_round, a.concurrency, SOURCES[name])
                secs[name] += time.perf_counter() - t0
                after = (cpu_ns(pid) if pid else 0, cpu_ns(backend_pid), time.process_time_ns())
                for who, b, e in zip(("proxy", "backend", "client"), before, after, strict=True):
                    cpu[name][who] += e - b
        print(f"{kind}:")
        print(
            f"  {'target':<10} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'req/s ÷ direct':>14} {'p99 ÷ direct':>12}"
            f" {'proxy µs/req':>12} {'backend µs/req':>14} {'client µs/req':>13}"
        )
        rows = {}
        for name in targets:
            ls = sorted(lat[name])
            count = len(ls)
            rows[name] = (count / secs[name], ls[count // 2] / 1e6, ls[int(count * 0.99)] / 1e6)
            us = {who: v / count / 1e3 for who, v in cpu[name].items()}
            rps, p50, p99 = rows[name]
            print(
                f"  {name:<10} {rps:>8.0f} {p50:>7.3f} {p99:>7.3f} {rps / rows['direct'][0]:>14.2f}"
                f" {p99 / rows['direct'][2]:>12.2f} {us['proxy']:>12.1f} {us['backend']:>14.1f} {us['client']:>13.1f}"
            )
        for name in ("VIP", "HAProxy") if haproxy_pid is not None else ("VIP",):
            got, direct = rows[name], rows["direct"]
            proxy_us = cpu[name]["proxy"] / len(lat[name]) / 1e3
            summary.append(
                f"{loop if name == 'VIP' else '(C)':<8} {kind:<10} {name:<7} {got[0] / direct[0]:.2f}x req/s, "
                f"p99 {got[2]:.3f} vs {direct[2]:.3f} ms ({got[2] / direct[2]:.2f}x), "
                f"proxy {proxy_us:.1f} µs CPU/req"
            )
    if a.bulk_mib > 0:
        summary.append(await _bulk(a, loop, targets, backend_pid))
    return summary


async def _bulk(a: Any, loop: str, targets: dict[str, tuple[tuple[str, int], int]], backend_pid: int) -> str:
    """One connection per target streams `--bulk-mib` MiB to the client: MiB/s and CPU per MiB."""
    nbytes = a.bulk_mib << 20
    secs = dict.fromkeys(targets, 0.0)
    cpu = {name: [0, 0, 0] for name in targets}
    for (host, _), _pid in targets.values():
        await bulk(host, 1 << 20)  # warm-up
    for _ in range(a.rounds):
        for name, ((host, _), pid) in targets.items():
            before = (cpu_ns(pid) if pid else 0, cpu_ns(backend_pid), time.process_time_ns())
            t0 = time.perf_counter()
            await bulk(host, nbytes // a.rounds)
            secs[name] += time.perf_counter() - t0
            after = (cpu_ns(pid) if pid else 0, cpu_ns(backend_pid), time.process_time_ns())
            for i in range(3):
                cpu[name][i] += after[i] - before[i]
    mib = (nbytes // a.rounds) * a.rounds / (1 << 20)
    print(f"bulk ({mib:.0f} MiB per target, one connection, backend to client):")
    print(
        f"  {'target':<10} {'MiB/s':>8} {'÷ direct':>9} {'proxy µs/MiB':>13} {'backend µs/MiB':>15} {'client µs/MiB':>14}"
    )
    rate = {name: mib / secs[name] for name in targets}
    for name in targets:
        p, b, c = (v / mib / 1e3 for v in cpu[name])
        print(
            f"  {name:<10} {rate[name]:>8.0f} {rate[name] / rate['direct']:>9.2f} {p:>13.0f} {b:>15.0f} {c:>14.0f}"
        )
    vip_us = cpu["VIP"][0] / mib / 1e3
    return (
        f"{loop:<8} {'bulk':<10} VIP     {rate['VIP'] / rate['direct']:.2f}x MiB/s "
        f"({rate['VIP']:.0f} vs {rate['direct']:.0f}), proxy {vip_us:.0f} µs CPU/MiB"
    )


if __name__ == "__main__":
    main()
