"""`isthmus dns --workers N`: N processes answer on the same addresses (SO_REUSEPORT).

One Python process answers on one core at most. With SO_REUSEPORT the kernel spreads datagrams
(by source address and port) and TCP connections over several sockets bound to the same address,
so N worker processes serve N cores. Each worker is a whole `isthmus dns` with its own informers
and wire cache (N watches on the API: a DNS server's watch load is small).

The parent binds every worker's sockets (UDP + TCP per address, SO_REUSEPORT) and hands them over
as inherited file descriptors, so port 0 resolves once and a worker never binds anything itself.
It serves /metrics, /healthz and /readyz once for all: ready when every worker is ready. Metrics
are summed over the workers (the same families as one process), plus per-worker answered
queries and restarts. A worker sends its counters to the parent over a socketpair every
REPORT_INTERVAL (so /metrics lags by at most that); a worker that dies is restarted with new
sockets, its counters carried over; SIGTERM stops all. A worker whose parent is gone (the
socketpair reads EOF) stops itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from isthmus.dns.metrics import DnsStats, add_snapshots
from isthmus.dns.server import bind_pair

__all__ = ["REPORT_INTERVAL", "DnsWorkers", "WorkerSpec", "final_report", "parse_workers", "report_to_parent"]

log = logging.getLogger(__name__)

REPORT_INTERVAL = 0.25
"""Seconds between a worker's reports (readiness and counters) to the parent."""
STOP_GRACE = 10.0
"""Seconds a worker has to stop after SIGTERM before it is killed."""
HEALTHY_RUN = 10.0
"""A worker that ran this long before dying is restarted at once; quicker deaths back off."""


@dataclass
class WorkerSpec:
    """What a worker process is told on its command line (as JSON)."""

    index: int
    status_fd: int
    fds: list[tuple[int, int]]
    """(UDP, TCP) descriptors per listen address, inherited from the parent."""

    def to_json(self) -> str:
        return json.dumps({"index": self.index, "status_fd": self.status_fd, "fds": self.fds})

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        d = json.loads(text)
        return cls(int(d["index"]), int(d["status_fd"]), [(int(u), int(t)) for u, t in d["fds"]])

    def sockets(self) -> list[tuple[socket.socket, socket.socket]]:
        out = []
        for u, t in self.fds:
            udp, tcp = socket.socket(fileno=u), socket.socket(fileno=t)
            udp.setblocking(False)
            tcp.setblocking(False)
            out.append((udp, tcp))
        return out


@dataclass
class _Slot:
    index: int
    stats: DnsStats
    proc: asyncio.subprocess.Process | None = None
    base: dict[str, Any] | None = None
    """Counters of this slot's previous workers (restarts), added to the current one's."""
    last: dict[str, Any] | None = None
    started: float = 0.0
    fast_deaths: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class DnsWorkers:
    """The parent of `count` DNS worker processes (a run_component Component).

    `command(spec)` is a worker's argv (the CLI re-runs itself in worker mode); `listen` the
    addresses. Sockets are bound here with SO_REUSEPORT and passed to each worker.
    """

    def __init__(
        self, command: Callable[[WorkerSpec], list[str]], listen: list[tuple[str, int]], count: int
    ) -> None:
        if count < 1:
            raise ValueError("--workers must be at least 1")
        self.command = command
        self.listen = list(listen)
        self.count = count
        self.bound: list[tuple[str, int]] = []
        self._slots = [_Slot(i, DnsStats(worker=i)) for i in range(count)]
        self._stopping = False
        self._supervisors: list[asyncio.Task[None]] = []

    @property
    def ready(self) -> bool:
        return all(s.proc is not None and s.proc.returncode is None and s.stats.ready for s in self._slots)

    def pids(self) -> list[int]:
        """The running workers' process IDs (tests, benchmarks)."""
        return [s.proc.pid for s in self._slots if s.proc is not None and s.proc.returncode is None]

    async def start(self) -> None:
        """Resolve the ports (port 0: a free one, the same for every worker), then start each worker."""
        for host, port in self.listen:
            if port == 0:  # a pair free right now; another process could take it before we rebind
                udp, tcp = bind_pair(host, 0)
                port = udp.getsockname()[1]
                udp.close()
                tcp.close()
            self.bound.append((host, port))
        try:
            for slot in self._slots:
                await self._spawn(slot)
            loop = asyncio.get_running_loop()
            for slot in self._slots:
                supervisor = loop.create_task(self._supervise(slot), name=f"dns worker {slot.index} supervisor")
                self._supervisors.append(supervisor)
        except BaseException:
            await self.stop()
            raise
        log.info("dns workers started", extra={"workers": self.count, "pids": self.pids()})

    async def _spawn(self, slot: _Slot) -> None:
        pairs: list[tuple[socket.socket, socket.socket]] = []
        parent_end, child_end = socket.socketpair()
        try:
            for host, port in self.bound:
                pairs.append(bind_pair(host, port, reuse_port=True))
            spec = WorkerSpec(slot.index, child_end.fileno(), [(u.fileno(), t.fileno()) for u, t in pairs])
            fds = [child_end.fileno(), *(fd for pair in spec.fds for fd in pair)]
            slot.proc = await asyncio.create_subprocess_exec(*self.command(spec), pass_fds=fds)
        except BaseException:
            parent_end.close()
            raise
        finally:  # the worker has its copies; ours would keep a dead worker's socket in the group
            child_end.close()
            for u, t in pairs:
                u.close()
                t.close()
        slot.started = time.monotonic()
        slot.last = None
        slot.stats.ready = False
        loop = asyncio.get_running_loop()
        slot.tasks.append(loop.create_task(self._listen(slot, parent_end), name=f"dns worker {slot.index}"))

    async def _listen(self, slot: _Slot, sock: socket.socket) -> None:
        """Apply the worker's reports until it closes its end."""
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
        try:
            while line := await reader.readline():
                snap = json.loads(line)
                slot.last = snap
                slot.stats.load(add_snapshots(slot.base, snap) if slot.base else snap)
        finally:
            writer.close()

    async def _supervise(self, slot: _Slot) -> None:
        """Restart the slot's worker whenever it dies (backing off if it keeps dying young)."""
        while True:
            proc = slot.proc
            assert proc is not None
            code = await proc.wait()
            if self._stopping:
                return
            lived = time.monotonic() - slot.started
            slot.fast_deaths = 0 if lived >= HEALTHY_RUN else slot.fast_deaths + 1
            log.warning(
                "dns worker died: restarting",
                extra={"worker": slot.index, "pid": proc.pid, "code": code, "after_s": round(lived, 1)},
            )
            if slot.tasks:  # its last report may still be in the socketpair: read to EOF (briefly)
                await asyncio.wait(slot.tasks, timeout=1.0)
            for t in slot.tasks:
                t.cancel()
            slot.tasks = []
            if slot.last is not None:
                slot.base = add_snapshots(slot.base, slot.last) if slot.base else slot.last
            slot.stats.restarts += 1
            slot.stats.ready = False
            slot.stats.tcp_connections = 0
            while True:
                if slot.fast_deaths > 1:
                    await asyncio.sleep(min(30.0, 0.5 * 2 ** (slot.fast_deaths - 1)))
                if self._stopping:
                    return
                try:
                    await self._spawn(slot)
                    break
                except OSError as e:  # e.g. the port was taken meanwhile: try again later
                    log.error("dns worker could not be restarted", extra={"worker": slot.index, "error": str(e)})
                    slot.fast_deaths += 1

    def lame_duck(self) -> None:
        """The parent's lame-duck period begins: each worker starts its own now (SIGTERM: it turns
        not-ready, keeps answering for the same delay, then exits), whether or not the signal that
        stops the parent reached the workers too (a container runtime signals PID 1 alone, kube-lite
        the process group). Exiting workers are not restarted."""
        self._stopping = True
        for s in self._slots:
            if s.proc is not None and s.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    s.proc.send_signal(signal.SIGTERM)

    async def stop(self) -> None:
        """SIGTERM every worker, SIGKILL those still running after STOP_GRACE."""
        self._stopping = True
        procs = [s.proc for s in self._slots if s.proc is not None and s.proc.returncode is None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), STOP_GRACE)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        tasks = [*self._supervisors, *(t for s in self._slots for t in s.tasks)]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


async def report_to_parent(status: socket.socket, snapshot: Callable[[], dict[str, Any] | None]) -> None:
    """A worker's side: send `snapshot()` every REPORT_INTERVAL until the parent goes away (then
    return, and the worker stops). None means nothing to report yet (waiting to join)."""
    loop = asyncio.get_running_loop()
    status.setblocking(False)
    gone = loop.create_task(loop.sock_recv(status, 1))  # the parent never writes: EOF = it died
    try:
        while not gone.done():
            snap = snapshot()
            if snap is not None:
                try:
                    await loop.sock_sendall(status, json.dumps(snap).encode() + b"\n")
                except OSError:  # the parent is gone
                    return
            await asyncio.wait([gone], timeout=REPORT_INTERVAL)
    finally:
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await gone


def final_report(status: socket.socket, snapshot: Callable[[], dict[str, Any] | None]) -> None:
    """A stopping worker's last counters (best effort: the parent may be gone)."""
    snap = snapshot()
    if snap is None:
        return
    with contextlib.suppress(OSError):
        status.setblocking(True)
        status.settimeout(1.0)
        status.sendall(json.dumps(snap).encode() + b"\n")


def parse_workers(value: str) -> int:
    """`--workers` as given: a number, or 0 / "auto" for one per CPU."""
    v = value.strip().lower()
    if v in ("0", "auto"):
        return os.cpu_count() or 1
    if not v.isdigit():
        raise ValueError(f"--workers {value!r}: expected a number, 0 or auto")
    return int(v)
