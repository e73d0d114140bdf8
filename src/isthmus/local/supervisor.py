"""Process supervision for the local clusterset: start parts, restart the ones that exit, stop them.

A part is one long-running `isthmus` command. Each runs in its own session (a terminal's
Ctrl-C reaches the supervisor only, which then stops the parts in order) with stdout and stderr
appended to its log. A part that exits is restarted with exponential backoff (0.5 s doubling to
30 s, back to 0.5 s once it had run 60 s), so one crash costs seconds, a crash loop costs
little CPU, and a crash of one cluster never touches the others. What a run said last (its
`error: ...` line) is kept for `status`; a part that keeps refusing to start (exit code 2 at
once, e.g. an apiserver refusing a damaged database) is left stopped instead of looping.

Parts outlive a supervisor that crashed; the next supervisor adopts the healthy ones (see
`up.prepare`) and watches them like its children, through a pidfd.

Processes are only ever signalled when they are provably ours: the PID was recorded *and*
/proc/<pid>/cmdline names the state dir (a PID the kernel reused for something else does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp

from isthmus.local.kubelite.processes import ENTRY, POD_PRELOAD
from isthmus.local.state import PartState, open_private
from isthmus.procs.child import LISTEN_ENV
from isthmus.procs.entry import enabled as zygote_enabled
from isthmus.procs.zygote import Zygote, ZygoteProcess

log = logging.getLogger("isthmus.local")

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
HEALTHY_RESET = 60.0
STOP_GRACE = 10.0
PART_PRELOAD = (
    "isthmus.cli.main", "isthmus.runtime.loop", "uvloop", "isthmus.kube.client", "isthmus.apiserver.server",
    "isthmus.apiserver.builtins:builtin_resources", "isthmus.local.kubelite.run", "isthmus.proxy", "isthmus.ui.server",
    *POD_PRELOAD,
)
"""What the parts (apiservers, kube-lites, proxies, the web view) import: the supervisor's zygote loads it once,
and builds the built-in kinds' schemas every apiserver would build at start (cached per process). The pods'
modules too: every kube-lite forks its pods from this zygote as well (a connection of its own to it)."""


def part_zygote(root: Path, env: dict[str, str] | None) -> Zygote:
    """The fork server of a clusterset's parts (named for `root`, so `down` finds it)."""
    return Zygote(PART_PRELOAD, ENTRY, title=["--for", "supervisor", str(root)], env=env)


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


QUICK_EXIT = 10.0
"""A run shorter than this counts as a failure to start."""
REFUSED = 2
"""The exit code of a command refusing its input or data (`error: ...`, see cli.app.fail)."""
GIVE_UP_AFTER = 3
"""Consecutive quick refusals after which a part is left stopped: the same command with the same
data refuses again, and a silent restart loop would hide why."""
CRASH_LOOP = 3
"""Consecutive quick exits (any code) that make a part "crash-looping" for `trouble`."""
ADOPTED_POLL = 0.5
"""How often an adopted process is checked when pidfd_open is unavailable."""


@dataclass(frozen=True)
class PartSpec:
    """How to run one part and how to tell it is ready; `tier` orders stopping (highest first)."""

    name: str
    argv: list[str]
    log: Path
    ready_url: str
    tier: int
    zygote_client: bool = False
    """Give it a connection to the zygote that forks it (kube-lite forks its pods there)."""
    listen: tuple[str, int] | None = None
    """Socket activation: the supervisor listens on this address itself and starts the part when the
    first connection arrives, handing it the listening socket (``ISTHMUS_LISTEN_FD``). Until then
    the part is on standby and costs no process; after it exits, the next connection starts it."""


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def open_log(path: Path) -> BinaryIO:
    """Open a log for appending, private to the user (a child inherits it; the caller closes it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.fdopen(open_private(path, os.O_WRONLY | os.O_APPEND), "ab")


def _open_log(path: Path, banner: str) -> BinaryIO:
    """`open_log` with a line saying what starts now."""
    out = open_log(path)
    out.write(f"=== {_stamp()} isthmus up: {banner}\n".encode())
    out.flush()
    return out


def _note(path: Path, line: str) -> None:
    with contextlib.suppress(OSError), open_log(path) as out:
        out.write(f"=== {_stamp()} isthmus up: {line}\n".encode())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def last_error(path: Path, offset: int = 0, limit: int = 300) -> str | None:
    """What a run said last, from its log after `offset`: its last `error: ...` line, else its
    last line (a traceback ends with the exception). None when it printed nothing."""
    try:
        with open(path, "rb") as f:
            f.seek(max(offset, _size(path) - 16384))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return None
    lines = [ln for ln in lines if ln and not ln.startswith("=== ")]
    errors = [ln for ln in lines if ln.startswith("error:")]
    said = errors or lines
    return said[-1][:limit] if said else None


class _Child:
    """A part this supervisor started."""

    def __init__(self, proc: asyncio.subprocess.Process | ZygoteProcess, root: Path) -> None:
        self.proc, self.root, self.pid = proc, root, proc.pid

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    async def wait(self) -> int | None:
        return await self.proc.wait()

    def signal(self, sig: signal.Signals) -> None:
        if self.running and is_ours(self.pid, self.root):
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)


class _Adopted:
    """A part a previous supervisor started, still running and verified ours.

    Not our child: its exit is seen through a pidfd (or by polling), its exit code is unknown,
    and signals go through the pidfd, so a reused PID is never signalled.
    """

    def __init__(self, pid: int, root: Path, pidfd: int | None) -> None:
        self.pid, self.root, self._pidfd = pid, root, pidfd
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[None] = loop.create_future()
        if pidfd is not None:
            loop.add_reader(pidfd, self._gone)
        else:
            self._poller = asyncio.create_task(self._poll(), name=f"watch pid {pid}")

    @classmethod
    def open(cls, pid: int, root: Path) -> _Adopted | None:
        """Watch `pid` if it is ours (None when it is gone or not ours)."""
        if not is_ours(pid, root):
            return None
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        except (OSError, AttributeError):  # kernel < 5.3: poll instead
            pidfd = None
        if not is_ours(pid, root):  # verified again: the pidfd may have caught a reused PID
            if pidfd is not None:
                os.close(pidfd)
            return None
        return cls(pid, root, pidfd)

    def _gone(self) -> None:
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if not self._exited.done():
            self._exited.set_result(None)

    async def _poll(self) -> None:
        while is_ours(self.pid, self.root):  # noqa: ASYNC110 (no event tells us another process exited)
            await asyncio.sleep(ADOPTED_POLL)
        self._gone()

    @property
    def running(self) -> bool:
        return not self._exited.done()

    async def wait(self) -> int | None:
        await asyncio.shield(self._exited)
        return None

    def signal(self, sig: signal.Signals) -> None:
        if not self.running:
            return
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)
        else:
            _signal(self.pid, sig, self.root)


class Supervisor:
    """Runs parts until `stop()` (children it starts, or processes it adopts); reports every
    change of a part's state to `on_change`."""

    def __init__(
        self, root: Path, on_change: Callable[[str, PartState], None], env: dict[str, str] | None = None,
        zygote: Zygote | None = None,
    ) -> None:
        self.root = root
        self.on_change = on_change
        self.env = env
        self.specs: dict[str, PartSpec] = {}
        self.states: dict[str, PartState] = {}
        self.quick_exits: dict[str, int] = {}
        self._procs: dict[str, _Child | _Adopted] = {}
        self._listeners: dict[str, socket.socket] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()
        self._zygote: Zygote | None = zygote
        if zygote is None and zygote_enabled():  # parts are forked from it (procs/zygote.py); it goes when we do, they stay
            self._zygote = part_zygote(root, env)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self, spec: PartSpec, previous: PartState | None = None, adopt: int | None = None) -> None:
        """Keep `spec` running: adopt the running process `adopt` if it is still ours, else launch
        it (restart counts carry over from `previous`)."""
        self.specs[spec.name] = spec
        state = PartState(restarts=previous.restarts if previous else 0)
        if adopt is not None and previous is not None:
            state.started_at = previous.started_at
        self.states[spec.name] = state
        self.quick_exits[spec.name] = 0
        self._tasks[spec.name] = asyncio.create_task(self._keep_running(spec, adopt), name=f"part {spec.name}")

    def retry_failed(self) -> list[str]:
        """Start again the parts given up on (after their cause was fixed); returns their names."""
        names = [n for n, st in self.states.items() if st.failed and not self.stopping]
        for name in names:
            self.states[name].failed = False
            self.quick_exits[name] = 0
            self.on_change(name, self.states[name])
            self._tasks[name] = asyncio.create_task(self._keep_running(self.specs[name], None), name=f"part {name}")
        return names

    def trouble(self, names: Iterable[str]) -> dict[str, str]:
        """Parts of `names` given up on or crash-looping, with what they said last."""
        out = {}
        for name in names:
            st = self.states.get(name)
            if st is None or not (st.failed or self.quick_exits.get(name, 0) >= CRASH_LOOP):
                continue
            said = st.last_error or (f"exit code {st.last_exit}" if st.last_exit is not None else "no output")
            how = "refused to start" if st.failed else "keeps exiting at start"
            out[name] = f"{how}: {said}"
        return out

    def prestart(self) -> None:
        """Start the zygote now (before the first part needs it)."""
        if self._zygote is not None:
            self._zygote.prestart()

    async def run_command(self, argv: list[str], log_path: Path, within: float) -> int:
        """`run_command` with this supervisor's environment and zygote."""
        return await run_command(argv, log_path, within, env=self.env, zygote=self._zygote)

    async def _spawn(self, spec: PartSpec) -> tuple[_Child, int]:
        listener = self._listeners.get(spec.name)
        listen_fd = listener.fileno() if listener is not None else None
        with _open_log(spec.log, f"starting {spec.name}") as out:
            offset = out.tell()
            proc: asyncio.subprocess.Process | ZygoteProcess
            if self._zygote is not None and self._zygote.forkable(spec.argv):
                proc = await self._zygote.spawn(spec.argv, env=self.env or dict(os.environ), stdout=out.fileno(),
                                                client=spec.zygote_client, listen_fd=listen_fd)
            else:
                env = dict(self.env or os.environ)
                if listen_fd is not None:
                    env[LISTEN_ENV] = str(listen_fd)
                proc = await asyncio.create_subprocess_exec(
                    *spec.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True, env=env, pass_fds=() if listen_fd is None else (listen_fd,),
                )
        return _Child(proc, self.root), offset

    async def _first_connection(self, spec: PartSpec, state: PartState) -> bool:
        """Socket activation: listen on `spec.listen` (on standby meanwhile) until a connection
        waits; False when stopping first. Connections queue in the backlog until the part accepts them."""
        assert spec.listen is not None
        listener = self._listeners.get(spec.name)
        if listener is None:
            listener = socket.create_server(spec.listen, backlog=128)
            listener.setblocking(False)
            self._listeners[spec.name] = listener
        state.standby = True
        self.on_change(spec.name, state)
        loop = asyncio.get_running_loop()
        waiting: asyncio.Future[None] = loop.create_future()
        loop.add_reader(listener.fileno(), _settle, waiting)
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait([waiting, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(listener.fileno())
            stop.cancel()
            waiting.cancel()
        state.standby = False
        if not self.stopping:
            log.info("%s: first connection on %s:%d: starting it", spec.name, *spec.listen)
        return not self.stopping

    async def _keep_running(self, spec: PartSpec, adopt: int | None) -> None:
        backoff = BACKOFF_START
        state = self.states[spec.name]
        refused = 0
        while not self.stopping:
            handle: _Child | _Adopted | None = None
            offset = 0
            if adopt is not None:
                handle = _Adopted.open(adopt, self.root)
                adopt = None
                if handle is not None:
                    offset = _size(spec.log)
                    _note(spec.log, f"{spec.name} (pid {handle.pid}) adopted by a new supervisor")
                    log.info("%s adopted (pid %d)", spec.name, handle.pid)
            if handle is None and spec.listen is not None:
                try:
                    if not await self._first_connection(spec, state):
                        return
                except OSError as e:  # the address is taken: retried as a failed start is
                    log.error("%s: cannot listen on %s:%d: %s", spec.name, *spec.listen, e)
                    state.standby, state.last_error = False, f"cannot listen on {spec.listen[0]}:{spec.listen[1]}: {e}"
            if handle is None and (spec.listen is None or spec.name in self._listeners):
                try:
                    handle, offset = await self._spawn(spec)
                except OSError as e:
                    log.error("%s: cannot start: %s", spec.name, e)
                    state.last_error = f"cannot start: {e}"
            started = time.monotonic()
            rc: int | None = None
            if handle is not None:
                self._procs[spec.name] = handle
                if self.stopping:  # stop() began while this one was being spawned
                    handle.signal(signal.SIGTERM)
                state.pid = handle.pid
                if isinstance(handle, _Child) or state.started_at is None:
                    state.started_at = time.time()
                self.on_change(spec.name, state)
                if isinstance(handle, _Child):
                    log.info("%s started (pid %d)", spec.name, handle.pid)
                rc = await handle.wait()
                self._procs.pop(spec.name, None)
                state.pid, state.last_exit = None, rc
                if not self.stopping:  # what a part says when asked to stop is no error
                    state.last_error = last_error(spec.log, offset)
                self.on_change(spec.name, state)
            if self.stopping:
                return
            ran = time.monotonic() - started
            if ran >= HEALTHY_RESET:
                backoff = BACKOFF_START
            quick = ran < QUICK_EXIT
            self.quick_exits[spec.name] = self.quick_exits.get(spec.name, 0) + 1 if quick else 0
            refused = refused + 1 if quick and rc == REFUSED else 0
            what = ("could not start" if handle is None else f"exited with code {rc}" if rc is not None
                    else "exited (adopted: exit code unknown)")
            said = f" (last output: {state.last_error})" if state.last_error else ""
            if refused >= GIVE_UP_AFTER:
                state.failed = True
                self.on_change(spec.name, state)
                log.error("%s %s, %d times in a row: not restarting it; fix the cause, then `isthmus up` "
                          "starts it again%s", spec.name, what, refused, said)
                _note(spec.log, f"{spec.name} {what}, {refused} times in a row: not restarting it")
                return
            state.restarts += 1
            log.warning("%s %s; restarting in %.1fs (restart %d)%s", spec.name, what, backoff, state.restarts, said)
            _note(spec.log, f"{spec.name} {what}; restarting in {backoff:.1f}s")
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: 3.11's wait_for can swallow a cancel
                async with asyncio.timeout(backoff):
                    await self._stopping.wait()
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _on_standby(self, name: str) -> bool:
        """Listening for its first connection: ready as it is (probing it would start it)."""
        st = self.states.get(name)
        return st is not None and st.standby

    async def wait_ready(self, names: Iterable[str], within: float, fail_fast: bool = False) -> list[str]:
        """Poll /readyz of `names` until all answer 200 or `within` seconds (with `fail_fast`, until
        one is in `trouble`); returns the ones not ready."""
        pending = {n: self.specs[n].ready_url for n in names if not self._on_standby(n)}
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession(trust_env=False) as session:
            while pending and not self.stopping and time.monotonic() < deadline:
                if fail_fast and self.trouble(pending):
                    break
                results = await asyncio.gather(*(probe(session, u) for u in pending.values()))
                pending = {n: u for (n, u), ok in zip(pending.items(), results, strict=True) if not ok}
                if pending:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.2):
                            await self._stopping.wait()
        return sorted(pending)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the parts tier by tier (highest first), SIGKILL whatever is left after `grace`."""
        self._stopping.set()
        deadline = time.monotonic() + grace
        for tier in sorted({s.tier for s in self.specs.values()}, reverse=True):
            procs = [p for n, p in self._procs.items() if self.specs[n].tier == tier]
            for p in procs:
                p.signal(signal.SIGTERM)
            await self._wait_procs(procs, deadline)
        for p in list(self._procs.values()):
            if p.running:
                log.warning("pid %d did not stop within %.0fs: SIGKILL", p.pid, grace)
                p.signal(signal.SIGKILL)
        await self._wait_procs(list(self._procs.values()), time.monotonic() + 5.0)
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for listener in self._listeners.values():
            listener.close()
        self._listeners.clear()
        if self._zygote is not None:
            await self._zygote.close()

    @staticmethod
    async def _wait_procs(procs: list[_Child | _Adopted], deadline: float) -> None:
        left = max(0.0, deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await asyncio.gather(*(p.wait() for p in procs))


async def run_command(argv: list[str], log_path: Path, within: float, env: dict[str, str] | None = None,
                      zygote: Zygote | None = None) -> int:
    """Run a one-shot command (deploy-broker, join) with output appended to `log_path` (forked from
    `zygote` when it is an isthmus command)."""
    with _open_log(log_path, " ".join(argv[1:])) as out:
        proc: asyncio.subprocess.Process | ZygoteProcess
        if zygote is not None and zygote.forkable(argv):
            proc = await zygote.spawn(argv, env=env or dict(os.environ), stdout=out.fileno())
        else:
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
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
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
