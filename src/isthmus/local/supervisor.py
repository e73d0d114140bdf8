"""Process supervision for the local clusterset: start parts, restart the ones that exit, stop them.

A part is one long-running `isthmus` command. Each runs in its own session (a terminal's
Ctrl-C reaches the supervisor only, which then stops the parts in order) with stdout and stderr
appended to its log. A part that exits is restarted with exponential backoff (0.5 s doubling to
30 s, back to 0.5 s once it had run 60 s), so one crash costs seconds, a crash loop costs
little CPU, and a crash of one cluster never touches the others.

Processes are only ever signalled when they are provably ours: the PID was recorded *and*
/proc/<pid>/cmdline names the state dir (a PID the kernel reused for something else does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import aiohttp

from isthmus.local.state import PartState

log = logging.getLogger("isthmus.local")

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
HEALTHY_RESET = 60.0
STOP_GRACE = 10.0


# --- process identity ----------------------------------------------------------------------------


def cmdline(pid: int) -> list[str] | None:
    """The process's arguments, or None when it is gone (or a zombie, whose cmdline is empty)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    if not raw:
        return None
    return [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]


def _names(arg: str, root: str) -> bool:
    for value in (arg, arg.partition("=")[2]):
        if value == root or value.startswith(root + "/"):
            return True
    return False


def is_ours(pid: int | None, root: Path, *, marker: str | None = None) -> bool:
    """True when `pid` is alive and one of its arguments is the state dir or a path inside it
    (and, with `marker`, one argument equals it: e.g. ``--supervise``)."""
    if not pid or pid <= 0 or pid == os.getpid():
        return False
    args = cmdline(pid)
    if args is None:
        return False
    r = str(root)
    return any(_names(a, r) for a in args) and (marker is None or marker in args)


def _signal(pid: int, sig: signal.Signals, root: Path, marker: str | None = None) -> bool:
    """Signal `pid` only if it is verified ours right now."""
    if not is_ours(pid, root, marker=marker):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
        return True
    return False


def stop_rank(name: str) -> int:
    """Stop order by name: the supervisor, then the clients of the apiservers (so the agent can
    release its Lease), then the cluster apiservers, the broker's last."""
    if name == "supervisor":
        return 0
    if name == "broker-apiserver":
        return 3
    return 2 if name.endswith("-apiserver") else 1


def terminate(pids: dict[str, int], root: Path, grace: float = STOP_GRACE) -> dict[str, int]:
    """SIGTERM every verified PID in `stop_rank` order (each group waits for the previous, all
    within `grace`), then SIGKILL the stragglers (verified again).

    For processes that are not our children (`isthmus down` after a supervisor crash); returns
    the ones still alive at the end, normally none.
    """
    deadline = time.monotonic() + grace
    for rank in sorted({stop_rank(n) for n in pids}):
        group = {n: p for n, p in pids.items() if stop_rank(n) == rank and is_ours(p, root)}
        for pid in group.values():
            _signal(pid, signal.SIGTERM, root)
        while group and time.monotonic() < deadline:
            time.sleep(0.05)
            group = {n: p for n, p in group.items() if is_ours(p, root)}
    live = {n: p for n, p in pids.items() if is_ours(p, root)}
    for pid in live.values():
        _signal(pid, signal.SIGKILL, root)
    deadline = time.monotonic() + 3.0
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = {n: p for n, p in live.items() if is_ours(p, root)}
    return live


async def probe(session: aiohttp.ClientSession, url: str, limit: float = 1.0) -> bool:
    """GET /readyz: True on 200 (no certificate check: it is our own server on 127.0.0.1)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=limit), ssl=False) as r:
            return r.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


# --- the supervisor ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartSpec:
    """How to run one part and how to tell it is ready; `tier` orders stopping (highest first)."""

    name: str
    argv: list[str]
    log: Path
    ready_url: str
    tier: int


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _open_log(path: Path, banner: str) -> BinaryIO:
    """Open a log for appending (a child inherits it) with a line saying what starts now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = open(path, "ab")  # handed to the child; the caller closes it
    out.write(f"=== {_stamp()} isthmus up: {banner}\n".encode())
    out.flush()
    return out


def _note(path: Path, line: str) -> None:
    with contextlib.suppress(OSError), open(path, "a") as out:
        out.write(f"=== {_stamp()} isthmus up: {line}\n")


class Supervisor:
    """Runs parts as child processes until `stop()`; reports every PID change to `on_change`."""

    def __init__(
        self, root: Path, on_change: Callable[[str, PartState], None], env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.on_change = on_change
        self.env = env
        self.specs: dict[str, PartSpec] = {}
        self.states: dict[str, PartState] = {}
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self, spec: PartSpec, previous: PartState | None = None) -> None:
        """Launch `spec` and keep it running (restart counts carry over from `previous`)."""
        self.specs[spec.name] = spec
        self.states[spec.name] = PartState(restarts=previous.restarts if previous else 0)
        self._tasks[spec.name] = asyncio.create_task(self._keep_running(spec), name=f"part {spec.name}")

    async def _spawn(self, spec: PartSpec) -> asyncio.subprocess.Process:
        with _open_log(spec.log, f"starting {spec.name}") as out:
            return await asyncio.create_subprocess_exec(
                *spec.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, env=self.env,
            )

    async def _keep_running(self, spec: PartSpec) -> None:
        backoff = BACKOFF_START
        state = self.states[spec.name]
        while not self.stopping:
            try:
                proc = await self._spawn(spec)
            except OSError as e:
                log.error("%s: cannot start: %s", spec.name, e)
                rc: int | None = None
                started = time.monotonic()
            else:
                self._procs[spec.name] = proc
                if self.stopping:  # stop() began while this one was being spawned
                    self._kill(proc, signal.SIGTERM)
                started = time.monotonic()
                state.pid, state.started_at = proc.pid, time.time()
                self.on_change(spec.name, state)
                log.info("%s started (pid %d)", spec.name, proc.pid)
                rc = await proc.wait()
                self._procs.pop(spec.name, None)
                state.pid, state.last_exit = None, rc
                self.on_change(spec.name, state)
            if self.stopping:
                return
            if time.monotonic() - started >= HEALTHY_RESET:
                backoff = BACKOFF_START
            state.restarts += 1
            what = f"exited with code {rc}" if rc is not None else "could not start"
            log.warning("%s %s; restarting in %.1fs (restart %d)", spec.name, what, backoff, state.restarts)
            _note(spec.log, f"{spec.name} {what}; restarting in {backoff:.1f}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def wait_ready(self, names: Iterable[str], within: float) -> list[str]:
        """Poll /readyz of `names` until all answer 200 or `within` seconds; returns the ones not ready."""
        pending = {n: self.specs[n].ready_url for n in names}
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession(trust_env=False) as session:
            while pending and not self.stopping and time.monotonic() < deadline:
                results = await asyncio.gather(*(probe(session, u) for u in pending.values()))
                pending = {n: u for (n, u), ok in zip(pending.items(), results, strict=True) if not ok}
                if pending:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), 0.2)
        return sorted(pending)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the parts tier by tier (highest first), SIGKILL whatever is left after `grace`."""
        self._stopping.set()
        deadline = time.monotonic() + grace
        for tier in sorted({s.tier for s in self.specs.values()}, reverse=True):
            procs = [p for n, p in self._procs.items() if self.specs[n].tier == tier]
            for p in procs:
                self._kill(p, signal.SIGTERM)
            await self._wait_procs(procs, deadline)
        for p in list(self._procs.values()):
            if p.returncode is None:
                log.warning("pid %d did not stop within %.0fs: SIGKILL", p.pid, grace)
                self._kill(p, signal.SIGKILL)
        await self._wait_procs(list(self._procs.values()), time.monotonic() + 5.0)
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _kill(self, proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
        if proc.returncode is None and is_ours(proc.pid, self.root):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    @staticmethod
    async def _wait_procs(procs: list[asyncio.subprocess.Process], deadline: float) -> None:
        left = max(0.0, deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), left)


async def run_command(argv: list[str], log_path: Path, within: float, env: dict[str, str] | None = None) -> int:
    """Run a one-shot command (deploy-broker, join) with output appended to `log_path`."""
    with _open_log(log_path, " ".join(argv[1:])) as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, env=env,
        )
    try:
        async with asyncio.timeout(within):
            return await proc.wait()
    except TimeoutError:
        return -1
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def tail(path: Path, lines: int = 15) -> list[str]:
    """The last lines of a log (for error messages)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            data = f.read().decode(errors="replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]
