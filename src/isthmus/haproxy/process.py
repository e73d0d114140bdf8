"""One HAProxy instance: a master-worker process tree, its master CLI and its runtime API.

- Started as `haproxy -W -S <dir>/master.sock -f <dir>/haproxy.cfg -p <dir>/haproxy.pid` in the
  foreground: the master is our child, so its death is seen at once (and it dies with us:
  PR_SET_PDEATHSIG).
- Every config is checked with `haproxy -c` before it is written where the master reads it.
- Reload = `reload` on the master CLI, confirmed by `show proc` (the master's reload counter moved
  and a new worker runs). The stats socket has `expose-fd listeners`, so the new worker takes over
  the listening sockets (no refused connection), and `idle-close-on-response` lets the old worker
  finish its keep-alive connections after their next response (no failed request).
- Server changes go through the worker's runtime API (`set server ... addr/state`): no reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_prctl: Any
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _prctl = None

START_TIMEOUT = 10.0
RELOAD_TIMEOUT = 10.0
CHECK_TIMEOUT = 15.0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if _prctl is not None:
        _prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


@functools.cache
def has_prometheus_exporter(binary: str) -> bool:
    """Whether `binary` was built with the Prometheus exporter service (`haproxy -vv`): a config
    using it would be refused by a build without it."""
    try:
        done = subprocess.run([binary, "-vv"], capture_output=True, text=True, timeout=CHECK_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "prometheus-exporter" in done.stdout + done.stderr


class HAProxyError(RuntimeError):
    """HAProxy refused a config or failed to start/reload; the message is HAProxy's own."""


@dataclass(frozen=True)
class ProcInfo:
    master_pid: int
    reloads: int
    workers: tuple[int, ...]
    """Current workers (reloads column 0)."""
    old_workers: tuple[int, ...]


def parse_show_proc(text: str) -> ProcInfo:
    """The master CLI's `show proc` table (HAProxy 2.6)."""
    master_pid, reloads = 0, 0
    workers: list[int] = []
    old: list[int] = []
    section = "master"
    for line in text.splitlines():
        if line.startswith("# workers"):
            section = "workers"
            continue
        if line.startswith("# old workers"):
            section = "old"
            continue
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split()
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        if fields[1] == "master":
            master_pid, reloads = int(fields[0]), int(fields[2])
        elif fields[1] == "worker":
            (workers if section == "workers" else old).append(int(fields[0]))
    return ProcInfo(master_pid, reloads, tuple(workers), tuple(old))


async def socket_command(path: Path, command: str, timeout: float = 5.0) -> str:  # noqa: ASYNC109
    """Send one (or `;`-separated several) CLI command(s) on a UNIX socket; the whole answer."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_unix_connection(str(path))
        try:
            writer.write(command.encode() + b"\n")
            await writer.drain()
            writer.write_eof()  # the master CLI answers, then waits for more unless told there is none
            return (await reader.read()).decode(errors="replace")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def check_config(binary: str, cfg: Path) -> None:
    """`haproxy -c`: HAProxyError with HAProxy's diagnostics when it refuses the file."""
    proc = await asyncio.create_subprocess_exec(
        binary, "-c", "-f", str(cfg), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise HAProxyError("haproxy -c did not finish") from None
    if proc.returncode != 0:
        raise HAProxyError(_diagnostics(out.decode(errors="replace")) or f"haproxy -c exited {proc.returncode}")


def _diagnostics(text: str) -> str:
    """HAProxy's alerts (else its other non-notice lines), last ones first in importance."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    alerts = [ln for ln in lines if "[ALERT]" in ln]
    chosen = alerts or [ln for ln in lines if "[NOTICE]" not in ln]
    return "; ".join(chosen[-6:])[:1000]


class Instance:
    """The HAProxy process tree of one pool instance, in its own run directory."""

    def __init__(self, binary: str, run_dir: Path) -> None:
        self.binary = binary
        self.run_dir = run_dir
        self.cfg = run_dir / "haproxy.cfg"
        # UNIX socket paths are limited to 107 bytes (HAProxy: 97): when the run directory's would
        # be longer, the sockets live in a short private directory named after it.
        self.sock_dir = run_dir
        if len(str(run_dir.resolve() / "master.sock")) > 90:
            digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]
            self.sock_dir = Path("/tmp") / f"isthmus-haproxy-{os.getuid()}" / digest
        self.master_sock = self.sock_dir / "master.sock"
        self.admin_sock = self.sock_dir / "admin.sock"
        self.pid_file = run_dir / "haproxy.pid"
        self.log_file = run_dir / "haproxy.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.reloads = 0
        self.runtime_updates = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def prepare(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.sock_dir != self.run_dir:
            self.sock_dir.parent.mkdir(mode=0o700, exist_ok=True)
            self.sock_dir.mkdir(mode=0o700, exist_ok=True)

    async def write_checked(self, text: str, *, checked: bool = False) -> None:
        """Check `text` with `haproxy -c` (unless `checked`: `check` passed it just now), then make it
        the config file (atomically)."""
        self.prepare()
        candidate = self.run_dir / "haproxy.cfg.new"
        candidate.write_text(text)
        if not checked:
            try:
                await check_config(self.binary, candidate)
            except HAProxyError:
                candidate.unlink(missing_ok=True)
                raise
        os.replace(candidate, self.cfg)

    async def check(self, text: str) -> None:
        """`haproxy -c` on `text` without making it the config (HAProxyError: refused)."""
        self.prepare()
        candidate = self.run_dir / "haproxy.cfg.check"
        candidate.write_text(text)
        try:
            await check_config(self.binary, candidate)
        finally:
            candidate.unlink(missing_ok=True)

    def write_unchecked(self, text: str) -> None:
        """Rewrite the file after runtime-API changes (the same text as a checked one but for
        server addresses), so a later reload keeps them."""
        tmp = self.run_dir / "haproxy.cfg.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.cfg)

    def stop_stale(self) -> None:
        """A master left by an earlier pool manager (same run dir): stopped before we start ours."""
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            return
        if cmdline and os.path.basename(cmdline[0].decode(errors="replace")).startswith("haproxy") and str(
            self.cfg
        ).encode() in cmdline:
            log.info("stopping a stale HAProxy master", extra={"pid": pid, "dir": str(self.run_dir)})
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    async def start(self) -> None:
        """Start the master on the current config file; returns once a worker serves."""
        self.stop_stale()
        self.master_sock.unlink(missing_ok=True)
        log_fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                self.binary, "-W", "-S", f"{self.master_sock},mode,600", "-f", str(self.cfg), "-p", str(self.pid_file),
                stdin=asyncio.subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
                preexec_fn=_die_with_parent, start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(log_fd)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        while True:
            if self.proc.returncode is not None:
                raise HAProxyError(self._log_tail() or f"haproxy exited {self.proc.returncode} at start")
            with contextlib.suppress(OSError, TimeoutError):
                info = parse_show_proc(await socket_command(self.master_sock, "show proc", 1.0))
                if info.workers:
                    return
            if loop.time() > deadline:
                await self.stop()
                raise HAProxyError(f"no HAProxy worker within {START_TIMEOUT:.0f}s: {self._log_tail()}")
            await asyncio.sleep(0.02)

    async def show_proc(self) -> ProcInfo:
        return parse_show_proc(await socket_command(self.master_sock, "show proc"))

    async def reload(self) -> None:
        """Hitless reload on the current config file, confirmed by `show proc`."""
        before = await self.show_proc()
        with contextlib.suppress(OSError, TimeoutError):
            await socket_command(self.master_sock, "reload", 2.0)  # the master re-executes: no answer
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RELOAD_TIMEOUT
        while True:
            if not self.running:
                raise HAProxyError(self._log_tail() or "haproxy exited during a reload")
            with contextlib.suppress(OSError, TimeoutError):
                after = await self.show_proc()
                if after.reloads > before.reloads and after.workers and set(after.workers) - set(before.workers):
                    self.reloads += 1
                    return
                if after.reloads > before.reloads and not after.workers:
                    raise HAProxyError(f"the new configuration did not start: {self._log_tail()}")
            if loop.time() > deadline:
                raise HAProxyError(f"reload not confirmed within {RELOAD_TIMEOUT:.0f}s: {self._log_tail()}")
            await asyncio.sleep(0.01)

    async def runtime(self, commands: list[str]) -> None:
        """Runtime API commands on the current worker; HAProxyError on any refusal."""
        if not commands:
            return
        # One connection per batch; answers are separated by blank lines.
        for i in range(0, len(commands), 64):
            batch = commands[i : i + 64]
            out = await socket_command(self.admin_sock, ";".join(batch))
            bad = [ln for ln in out.splitlines() if ln.strip() and not _runtime_ok(ln)]
            if bad:
                raise HAProxyError(f"runtime API refused: {'; '.join(bad[:3])}")
        self.runtime_updates += 1

    async def stop(self, grace: float = 5.0) -> None:
        """SIGUSR1 (soft stop: workers finish their connections), then SIGTERM, then SIGKILL."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        for sig, wait in ((signal.SIGUSR1, grace), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                async with asyncio.timeout(wait):
                    await proc.wait()
                return
            except TimeoutError:
                continue

    def remove(self) -> None:
        """Delete the run directory (and the private socket directory): the instance is stopped
        and its pool or slot gone, so nothing here is needed again."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.sock_dir != self.run_dir:
            shutil.rmtree(self.sock_dir, ignore_errors=True)

    async def wait(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    def _log_tail(self) -> str:
        try:
            return _diagnostics(self.log_file.read_text(errors="replace")[-4000:])
        except OSError:
            return ""


def _runtime_ok(line: str) -> bool:
    # `set server` answers nothing on success, or an informational line ("IP changed from ...",
    # "no need to change the addr", "port changed from ...").
    low = line.lower()
    return "changed from" in low or "no need to change" in low
