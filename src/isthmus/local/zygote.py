"""A fork server for the local clusterset's `isthmus` processes.

Every part of a local clusterset is a Python process that imports the same libraries (aiohttp,
lightkube, pydantic, the API models): about 45 MB of private memory and half a second of CPU each
before it does anything, thirty-odd times over on a machine that also runs the user's work. The
local clusterset therefore starts them the way Android starts apps and `multiprocessing` its
forkserver workers: one process (the zygote) imports everything once, freezes it out of the
garbage collector's reach (`gc.freeze`), and forks a child per process to run; the children share
the imported pages copy-on-write and start in milliseconds.

A forked child is indistinguishable from one started with `python -m isthmus ...` where it
matters: its own session and process group, stdin/stdout/stderr from the caller, the caller's
environment (``os.environ`` replaced), working directory and ``sys.argv``, and its
``/proc/<pid>/cmdline`` and ``/proc/<pid>/environ`` are the ones it would have had
(``PR_SET_MM_MAP``, no privilege needed), so ``ps``, ``isthmus down`` and the supervisor's
identity checks see the same command. Its exit status reaches the caller through the zygote,
which reaps it.

The protocol runs over one ``SOCK_SEQPACKET`` socket pair (one message per datagram): the caller
sends a JSON request with the descriptors for fds 0-2 attached (``SCM_RIGHTS``); the zygote answers
``{"seq", "pid"}`` (or ``{"seq", "error"}``) before anything else can happen to that child, then
``{"exit": pid, "code"}`` when it ends (``code`` as asyncio reports it: negative for a signal).
A child can be given a connection of its own (``client``: fd 3 and ``ISTHMUS_ZYGOTE_FD``): the
supervisor gives one to each kube-lite, which forks its pods there, so every process of a local
clusterset shares one zygote's pages. A child can instead be handed a listening socket (``listen_fd``:
fd 3 and ``ISTHMUS_LISTEN_FD``): the supervisor starts the web view that way on its first
connection (socket activation). A caller that goes away (EOF) takes its ``pdeathsig``
children (kube-lite's pods) along with SIGTERM, as their parent's death would; the others (the
supervisor's parts, which outlive a crashed supervisor) keep running, and the zygote serves until
its last caller is gone. Should the zygote itself die, its ``pdeathsig`` children die with it
(their kube-lite starts them again).

Only argv of the form ``[sys.executable, "-m", "isthmus", ...]`` is forked (`forkable`); anything
else is exec'ed as before. ``ISTHMUS_ZYGOTE=0`` turns the zygote off.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import faulthandler
import gc
import importlib
import io
import json
import logging
import os
import selectors
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ForkedCommand", "Zygote", "ZygoteProcess", "enabled", "fork_command", "forkable"]

log = logging.getLogger(__name__)

ENV = "ISTHMUS_ZYGOTE"
CLIENT_ENV = "ISTHMUS_ZYGOTE_FD"
"""Set in a child given a connection of its own to the zygote (`Zygote.spawn(client=True)`)."""
CLIENT_FD = 3
LISTEN_ENV = "ISTHMUS_LISTEN_FD"
"""Set in a child given a listening socket (`Zygote.spawn(listen_fd=...)`, socket activation): its fd."""
LISTEN_FD = 3
WARM_ENV = "ISTHMUS_ZYGOTE_WARM"
"""``0`` turns `_warm` off (to measure what it saves)."""
MAX_MESSAGE = 1 << 20
READY_TIMEOUT = 30.0
UNKNOWN_EXIT = -int(signal.SIGKILL)
"""The exit code of a child whose zygote died before reporting it (kube reports 137 for those)."""

_PR_SET_PDEATHSIG = 1
_PR_SET_MM = 35
_PR_SET_MM_MAP = 14


def _on(variable: str) -> bool:
    """A switch that is on unless the variable says 0, false, no or off."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off")


def enabled() -> bool:
    return _on(ENV)


def forkable(argv: Sequence[str]) -> bool:
    """True for `python -m isthmus ...` run by this very interpreter (what the zygote can become)."""
    return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] == "isthmus"


# --- the caller's side -------------------------------------------------------------------------


class ZygoteProcess:
    """What `asyncio.subprocess.Process` offers the local clusterset: pid, returncode, wait(),
    and stdout when a pipe was asked for."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader | None) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def _exited(self, code: int) -> None:
        if not self._done.done():
            self.returncode = code
            self._done.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._done)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("zygote not started: %s", task.exception())


def _stop_unwanted(reply: asyncio.Future[dict[str, Any]]) -> None:
    if not reply.cancelled() and reply.exception() is None and "pid" in reply.result():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(reply.result()["pid"]), signal.SIGTERM)


def _exit_code(pid: int) -> int | None:
    """The exit code of our child `pid` once it has ended (reaping it), None while it runs."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: its code is lost
        return UNKNOWN_EXIT
    return os.waitstatus_to_exitcode(status) if done else None


class _ForkedZygote:
    """The part of `asyncio.subprocess.Process` a Zygote uses, for a zygote this process forked
    itself (`Zygote.fork_now`): no event loop's child watcher knows it, so it is reaped here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        if self._code is None:
            self._code = _exit_code(self.pid)
        return self._code

    async def wait(self) -> int:
        if self.returncode is None:  # a pidfd turns readable when the process exits
            loop, gone = asyncio.get_running_loop(), asyncio.Event()
            fd = os.pidfd_open(self.pid)
            loop.add_reader(fd, gone.set)
            try:
                if self.returncode is None:
                    await gone.wait()
            finally:
                loop.remove_reader(fd)
                os.close(fd)
        code = self.returncode
        return UNKNOWN_EXIT if code is None else code

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """One fork server, started on first use. `preload`: modules to import before forking (what
    the children will run), ``module:function`` to also call a function of no arguments whose
    result the module caches; `title`: extra arguments naming the zygote in ``ps`` (and the state
    dir, so identity checks that look for it find it); `pdeathsig`: the zygote dies with its
    caller and every child with the zygote (kube-lite's pods)."""

    def __init__(self, preload: Sequence[str], *, title: Sequence[str] = (), pdeathsig: bool = False,
                 env: Mapping[str, str] | None = None) -> None:
        self.preload = tuple(preload)
        self.title = tuple(title)
        self.pdeathsig = pdeathsig
        self.env = dict(env) if env is not None else None
        self._sock: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | _ForkedZygote | None = None
        self._forked: tuple[int, socket.socket] | None = None
        self._attached: socket.socket | None = None
        self._shared_pid: int | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._lock = asyncio.Lock()
        self._seq = 0
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._children: dict[int, ZygoteProcess] = {}
        self._early: dict[int, int] = {}

    @property
    def pid(self) -> int | None:
        if self._proc is None:
            return self._shared_pid if self._sock is not None else None
        return self._proc.pid if self._proc.returncode is None else None

    def argv(self, fd: int) -> list[str]:
        """The zygote's command line: what `ps` and the identity checks see, however it started."""
        return [sys.executable, "-m", "isthmus.local.zygote", "--fd", str(fd), "--preload", ",".join(self.preload),
                *(["--pdeathsig"] if self.pdeathsig else []), *self.title]

    def fork_now(self) -> bool:
        """Fork the zygote from this very process, before it starts an event loop or a thread.

        A process that was itself forked from a zygote (kube-lite) already holds most of what its
        own zygote would import; forked rather than exec'ed, its zygote (and every child of it)
        shares those pages with the first zygote instead of importing a private copy: a second
        or so of CPU and tens of MB per node. False when this process runs threads (forking
        then is unsafe): the zygote then starts by exec on first use, as without this call."""
        if self._forked is not None or self._sock is not None or threading.active_count() > 1:
            return False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        # Frozen in both: the zygote's collection before it freezes would otherwise write the GC
        # header of every object inherited from here, and copy most of this process's pages.
        gc.collect()
        gc.freeze()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the forked zygote
            code = 1
            try:
                ours.close()
                _own_session(self.pdeathsig, parent)
                keep = theirs.fileno()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.closerange(3, keep)
                os.closerange(keep + 1, 65536)
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
                    signal.signal(sig, signal.SIG_DFL)
                env = dict(self.env) if self.env is not None else dict(os.environ)
                set_cmdline(self.argv(keep), env)
                os.environ.clear()
                os.environ.update(env)
                theirs.setblocking(True)
                serve(theirs, self.preload)
                code = 0
            except BaseException:
                import traceback

                with contextlib.suppress(BaseException):
                    traceback.print_exc()
            finally:
                os._exit(code)
        theirs.close()
        self._forked = (pid, ours)
        return True

    def attach_inherited(self) -> bool:
        """Use the zygote connection this process was started with (`spawn(client=True)`: kube-lite
        forked by the supervisor's zygote) instead of a zygote of its own: its children then share
        that zygote's pages with every other caller's. False without one (the variable is consumed,
        so nothing this process starts inherits it)."""
        raw = os.environ.pop(CLIENT_ENV, None)
        if raw is None or self._sock is not None or self._forked is not None or self._attached is not None:
            return False
        try:
            sock = socket.socket(fileno=int(raw))
        except (ValueError, OSError):
            return False
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET:
            sock.detach()
            return False
        sock.set_inheritable(False)
        self._attached = sock
        return True

    def prestart(self) -> None:
        """Start the zygote now, in the background, so the first spawn does not wait for its
        imports (a failure is logged; the next spawn tries again)."""
        if self._sock is None and (self._starting is None or self._starting.done()):
            self._starting = asyncio.ensure_future(self._start())
            self._starting.add_done_callback(_log_failure)

    async def _ensure_started(self) -> None:
        """Start the zygote unless it runs. A caller cancelled meanwhile (a Pod deleted while its
        first container starts) must not leave a half-started zygote: the start runs on its own."""
        if self._sock is not None:
            return
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        if self._attached is not None:  # another process's zygote: ours to use, not to stop
            ours, self._attached = self._attached, None
            self._proc = None
        elif self._forked is not None:  # fork_now ran: that zygote is importing already
            (pid, ours), self._forked = self._forked, None
            self._proc = _ForkedZygote(pid)
        else:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self.argv(theirs.fileno()),
                    pass_fds=[theirs.fileno()], stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                    env=self.env, preexec_fn=_set_pdeathsig if self.pdeathsig else None,
                )
            finally:
                theirs.close()
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                hello = json.loads(await loop.sock_recv(ours, MAX_MESSAGE) or b"{}")
        except (TimeoutError, ValueError, OSError):
            hello = {}
        if "ready" not in hello:
            ours.close()
            await self._discard()  # nothing was forked: no child to watch
            raise OSError("the zygote did not start (see the log above)")
        self._sock = ours
        self._reader = asyncio.create_task(self._read(ours), name="zygote reader")
        if self._proc is None:
            self._shared_pid = int(hello["ready"])
            log.info("zygote ready (pid %d, shared)", self._shared_pid)
        else:
            log.info("zygote ready (pid %d, %d module(s) preloaded)", self._proc.pid, len(self.preload))

    async def spawn(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None = None,
                    stdout: int | None = None, pipe_stdout: bool = False, pdeathsig: bool = False,
                    client: bool = False, listen_fd: int | None = None) -> ZygoteProcess:
        """Fork a child running `argv` (see `forkable`): stdin /dev/null, stdout and stderr to the
        `stdout` fd, or to a pipe read through the returned process's ``stdout`` (`pipe_stdout`).
        `client`: the child gets a connection of its own to this zygote (`attach_inherited`).
        `listen_fd`: a listening socket the child serves on (fd 3, named by ``ISTHMUS_LISTEN_FD``)."""
        if not forkable(argv):
            raise ValueError(f"not an isthmus command of this interpreter: {argv[:3]}")
        if client and listen_fd is not None:
            raise ValueError("a child gets a zygote connection or a listening socket as fd 3, not both")
        read_end: socket.socket | None = None
        write_end = -1
        if pipe_stdout:
            # A socket pair, not os.pipe(): uvloop closes a pipe's fd itself and then closes the file
            # object over it too, a second close(2) of a number that another thread (libuv's
            # workers) may have been given in between; a socket object it detaches instead.
            read_end, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            write_end = theirs.detach()
            out_fd = write_end
        elif stdout is not None:
            out_fd = stdout
        else:
            raise ValueError("stdout: an fd or pipe_stdout")
        try:
            async with self._lock:  # one request at a time: a reply answers the request before it
                await self._ensure_started()
                assert self._sock is not None
                self._seq += 1
                seq = self._seq
                reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
                self._replies[seq] = reply
                request = {"seq": seq, "argv": list(argv), "env": dict(env), "cwd": cwd, "pdeathsig": pdeathsig,
                           "client": client}
                try:
                    fds = [out_fd] if listen_fd is None else [out_fd, listen_fd]
                    socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
                except OSError:
                    self._replies.pop(seq, None)
                    await self._discard()
                    raise
                try:
                    answer = await asyncio.shield(reply)
                except asyncio.CancelledError:
                    reply.add_done_callback(_stop_unwanted)  # forked after all: nobody will wait for it
                    raise
        except BaseException:
            if read_end is not None:
                read_end.close()
            raise
        finally:
            if write_end >= 0:
                os.close(write_end)
        if "error" in answer:
            if read_end is not None:
                read_end.close()
            raise OSError(int(answer.get("errno") or 0), str(answer["error"]))
        reader = None
        if read_end is not None:
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=2**16, loop=loop)
            read_end.shutdown(socket.SHUT_WR)  # the child's output only comes in
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), read_end)
        proc = ZygoteProcess(int(answer["pid"]), reader)
        self._children[proc.pid] = proc
        if proc.pid in self._early:
            self._exit(proc.pid, self._early.pop(proc.pid))
        return proc

    def _exit(self, pid: int, code: int) -> None:
        proc = self._children.pop(pid, None)
        if proc is None:
            self._early[pid] = code
        else:
            proc._exited(code)

    async def _read(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(sock, MAX_MESSAGE)
                if not data:
                    break
                msg = json.loads(data)
                if "exit" in msg:
                    self._exit(int(msg["exit"]), int(msg["code"]))
                elif "seq" in msg:
                    fut = self._replies.pop(int(msg["seq"]), None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
        except (OSError, ValueError) as e:
            log.warning("zygote connection lost: %s", e)
        finally:
            if self._sock is sock:
                self._lost()

    def _lost(self) -> None:
        """The zygote is gone: pending requests fail; its children are watched by pidfd (their
        exit status died with it); the next spawn starts a new zygote."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(OSError("the zygote exited"))
        self._replies.clear()
        loop = asyncio.get_running_loop()
        for pid, proc in list(self._children.items()):
            try:
                fd = os.pidfd_open(pid)
            except OSError:  # already gone (and reaped by init)
                self._children.pop(pid, None)
                proc._exited(UNKNOWN_EXIT)
                continue

            def gone(fd: int = fd, pid: int = pid, proc: ZygoteProcess = proc) -> None:
                loop.remove_reader(fd)
                os.close(fd)
                self._children.pop(pid, None)
                proc._exited(UNKNOWN_EXIT)

            loop.add_reader(fd, gone)

    async def _discard(self) -> None:
        """Give up on this zygote (it failed to start or to take a request): kill it."""
        reader = self._reader
        if reader is not None and not reader.done():
            # Its sock_recv ends before the socket is closed (then by _read itself, through _lost):
            # uvloop aborts the process on a watched descriptor closed under it.
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if self._sock is not None or reader is None:
            self._lost()
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def close(self) -> None:
        """Let the zygote go (EOF: it exits). Children keep running unless they were started with
        `pdeathsig`."""
        if self._starting is not None and not self._starting.done():
            with contextlib.suppress(Exception):
                await self._starting
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if self._attached is not None:  # a shared zygote's connection, never used
            self._attached.close()
            self._attached = None
        if self._forked is not None:  # forked early, never used: EOF lets it go too
            (pid, unused), self._forked = self._forked, None
            unused.close()
            self._proc = _ForkedZygote(pid)
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                async with asyncio.timeout(5.0):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


class ForkedCommand:
    """What `subprocess.Popen` offers for a command `fork_command` started: pid, poll(), wait(),
    send_signal(), returncode."""

    def __init__(self, pid: int, argv: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(argv)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = _exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def fork_command(argv: Sequence[str], *, env: Mapping[str, str], out_fd: int,
                 pdeathsig: bool = False) -> ForkedCommand | None:
    """Run `python -m isthmus ...` (`argv`) in a child forked from this process, as a zygote's
    child runs (own session, /proc identity, stdin /dev/null, stdout and stderr to `out_fd`).

    For a process that has imported what the command needs already (`isthmus up` starting its
    supervisor): the child skips the interpreter's start and the imports. None when it cannot
    (the zygote is off, `argv` is not forkable, or a thread runs: forking then is unsafe); the
    caller then execs."""
    if not enabled() or not forkable(argv) or threading.active_count() > 1:
        return None
    return ForkedCommand(_fork_child({"argv": list(argv), "env": dict(env), "pdeathsig": pdeathsig}, out_fd), argv)


# --- the zygote's side -------------------------------------------------------------------------


_libc: Any = None
with contextlib.suppress(OSError, AttributeError):
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.sbrk.restype = ctypes.c_void_p


def _set_pdeathsig() -> None:  # pragma: no cover - runs between fork and exec
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _own_session(pdeathsig: bool, parent: int) -> None:  # pragma: no cover - runs in a forked child
    """A forked child's own session, and with `pdeathsig` a SIGTERM when `parent` dies (it exits at
    once if `parent` died before that was set)."""
    os.setsid()
    if pdeathsig and _libc is not None:
        _set_pdeathsig()
        if os.getppid() != parent:
            os._exit(1)


class _MMMap(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_uint64) for name in (
            "start_code", "end_code", "start_data", "end_data", "start_brk", "brk", "start_stack",
            "arg_start", "arg_end", "env_start", "env_end")),
        ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32),
    ]


_kept: list[Any] = []
_command: Any = None
"""The `isthmus` click command, built before forking (typer builds it on each call, from every
command's signature: about 7 MB of pages each child would otherwise copy)."""


def set_cmdline(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Point the kernel's view of this process's arguments and environment (what
    ``/proc/self/cmdline`` and ``environ`` read) at new NUL-separated copies. PR_SET_MM_MAP needs
    no privilege; False where the kernel refuses it (then ``ps`` shows the zygote's command)."""
    if _libc is None:
        return False
    args = b"".join(a.encode() + b"\0" for a in argv)
    envs = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()) or b"\0"
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        with open("/proc/self/auxv", "rb") as f:
            auxv = f.read()
    except OSError:
        return False
    fields = stat[stat.rindex(b")") + 2:].split()

    def field(n: int) -> int:  # proc(5) numbering: the first field after the name is number 3
        return int(fields[n - 3])

    arg_buf = ctypes.create_string_buffer(args, len(args))
    env_buf = ctypes.create_string_buffer(envs, len(envs))
    aux_buf = ctypes.create_string_buffer(auxv, len(auxv))
    mm = _MMMap(
        field(26), field(27), field(45), field(46), field(47), _libc.sbrk(0), field(28),
        ctypes.addressof(arg_buf), ctypes.addressof(arg_buf) + len(args),
        ctypes.addressof(env_buf), ctypes.addressof(env_buf) + len(envs),
        ctypes.addressof(aux_buf), len(auxv), 0xFFFFFFFF,
    )
    if _libc.prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0) != 0:
        return False
    _kept[:] = [arg_buf, env_buf]  # the kernel reads them from here for the process's lifetime
    return True


def _fault_tracebacks() -> None:
    """A fatal signal (an abort() in a C extension, a segfault) writes every thread's Python
    traceback to fd 2 (the zygote's, then each child's log) instead of dying without a word."""
    with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation, RuntimeError):
        faulthandler.enable(sys.stderr, all_threads=True)


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the caller is gone: the loop ends on EOF
        sock.send(json.dumps(msg).encode())


def _fork_child(request: dict[str, Any], out_fd: int, listen_fd: int | None = None) -> int:
    """Fork the requested process (`_child`); returns its pid once it has settled who it is."""
    started_r, started_w = os.pipe()
    me = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(started_r)
        if listen_fd is not None:
            request["listen_fd"] = listen_fd
        _child(request, out_fd, me, started_w)
    os.close(started_w)
    with contextlib.suppress(OSError):
        os.read(started_r, 1)  # EOF once the child settled who it is (or died)
    os.close(started_r)
    return pid


def _child(request: dict[str, Any], out_fd: int, zygote_pid: int, started: int) -> None:  # pragma: no cover
    """Become the requested process (forked); never returns. Its identity (session, cmdline,
    working directory, parent-death signal) is settled before `started` is closed, so the pid the
    caller gets can be signalled by process group and recognised by its cmdline at once."""
    code = 1
    try:
        _own_session(bool(request.get("pdeathsig")), zygote_pid)
        argv, env = list(request["argv"]), {str(k): str(v) for k, v in request["env"].items()}
        set_cmdline(argv, env)
        if request.get("cwd"):
            os.chdir(request["cwd"])
        os.close(started)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        first_closed = 3
        if request.get("client_fd") is not None:  # its own connection to this zygote, as fd 3
            os.dup2(int(request["client_fd"]), CLIENT_FD, inheritable=False)
            env[CLIENT_ENV] = str(CLIENT_FD)
            first_closed = CLIENT_FD + 1
        elif request.get("listen_fd") is not None:  # a listening socket to serve on, as fd 3
            os.dup2(int(request["listen_fd"]), LISTEN_FD, inheritable=False)
            env[LISTEN_ENV] = str(LISTEN_FD)
            first_closed = LISTEN_FD + 1
        os.closerange(first_closed, 65536)
        os.environ.clear()
        os.environ.update(env)
        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=unbuffered,
                                      line_buffering=not unbuffered and os.isatty(1))
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), errors="backslashreplace",
                                      write_through=True)
        _fault_tracebacks()
        import random
        import tempfile

        gc.enable()
        random.seed()  # every child would otherwise draw the zygote's sequence
        tempfile.tempdir = None
        import isthmus

        sys.argv = [os.path.join(os.path.dirname(isthmus.__file__), "__main__.py"), *argv[3:]]  # as -m sets it
        try:
            if _command is not None:
                _command.main(args=argv[3:], prog_name="python -m isthmus")
            else:
                from isthmus.cli.main import app

                app(prog_name="python -m isthmus")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
    except BaseException:
        import traceback

        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _pymalloc_free_space() -> tuple[dict[int, int], int]:
    """pymalloc's free room now: {size class: blocks free in pools partly used}, and unused pools."""
    fd = os.memfd_create("mallocstats")  # the statistics go to C's stderr: borrow fd 2 for them
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        os.dup2(fd, 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
        os.lseek(fd, 0, os.SEEK_SET)
        text = b"".join(iter(lambda: os.read(fd, 65536), b"")).decode("ascii", "replace")
    finally:
        os.close(saved)
        os.close(fd)
    free: dict[int, int] = {}
    unused = 0
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 5 and all(f.isdigit() for f in fields):
            free[int(fields[1])] = int(fields[4])
        elif "unused pools" in line and fields[0].isdigit():
            unused = int(fields[0])
    return free, unused


def _block(size: int) -> object:
    """A new object in pymalloc's size class `size` that holds no reference (never touched again)."""
    if size <= 16:
        return object()
    if size <= 32:
        return _HALF + 0.0  # a new float: 24 bytes
    return bytes(size - 33)  # a bytes object of n bytes takes 33 + n


_ballast: list[object] = []
_HALF = 0.5


def _fill_free_blocks(rounds: int = 3, unused_pools: bool = True) -> None:
    """Take every free block of the zygote's pymalloc pools (and its unused pools) with objects it
    keeps and never touches.

    A child's first allocations otherwise go to those free blocks: scattered over the zygote's pools,
    each one copies a shared page (and the pool header's page) for a few bytes. Taken here, the
    children allocate from arenas of their own, packed."""
    for round_ in range(rounds):
        free, unused = _pymalloc_free_space()
        if round_ or not unused_pools:  # then unused pools are in arenas the filling opened: never touched
            unused = 0
        wanted = sum(free.values()) + unused * (16384 // 512)
        if not wanted:
            return
        room = len(_ballast)
        _ballast.extend([None] * wanted)  # one allocation for the list before the blocks
        i = room
        for size, count in free.items():
            for _ in range(count):
                _ballast[i] = _block(size)
                i += 1
        for _ in range(unused * (16384 // 512)):
            _ballast[i] = _block(512)
            i += 1


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _fill_free_chunks() -> int:
    """The same for glibc's malloc, which holds the objects over 512 bytes: take the free chunks in
    the middle of the heap (a free chunk sits below the top chunk; a block carved from the top is
    handed back, and a smaller size tried). Returns how many chunks it took; 0 without glibc 2.33+."""
    mallinfo2 = getattr(_libc, "mallinfo2", None)
    if mallinfo2 is None:
        return 0
    malloc, free, sbrk = _libc.malloc, _libc.free, _libc.sbrk
    mallinfo2.restype = _MallInfo2
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.argtypes = [ctypes.c_void_p]
    taken, size = 0, 1 << 16
    while size >= 24:
        while True:
            top = (sbrk(0) or 0) - mallinfo2().keepcost
            block = malloc(size)
            if not block:
                return taken
            if block >= top:
                free(block)
                break
            taken += 1  # kept for good: never freed, never touched
        size = size * 3 // 4 if size > 64 else size - 8
    return taken


def _warm(command: Any, rounds: int = 10) -> None:
    """Run, before forking, the start-up code every child runs: parsing a command line (click) and
    building an API client (lightkube, httpx, the transport), a few times over.

    Python 3.11 writes into the code it runs: a function's bytecode is rewritten for the types it
    meets (quickening, then specialisation), and classes and module dictionaries get version tags
    on first use. Done here, those pages stay shared; left to the children, each copies them. With
    every pod forked from the supervisor's zygote, this took a pod's own memory from about 23 MB
    back to 17 MB (a kube-lite's zygote, forked from a running kube-lite, had had it for free).
    Nothing is left behind: no loop, thread or socket (a client connects on its first request),
    and what was built is garbage before the collection that precedes the freeze."""
    from lightkube import KubeConfig
    from lightkube.config.models import Cluster, User

    from isthmus.kube.client import client_for

    for _ in range(rounds):
        for name, sub in getattr(command, "commands", {}).items():
            with contextlib.suppress(Exception):
                sub.make_context(name, [], resilient_parsing=True)
        config = KubeConfig.from_one(cluster=Cluster(server="https://127.0.0.1:9"), user=User(token="warm"),
                                     namespace="default").get()
        assert config is not None
        client_for(config, field_manager="warm")


def serve(sock: socket.socket, preload: Sequence[str]) -> None:
    """The zygote's loop: import, warm, freeze, then fork on request and report exits until its
    last caller hangs up."""
    _fault_tracebacks()
    gc.disable()  # no collections while importing: freed holes in shared pages would be reused, and copied
    for name in preload:
        module, _, warm = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if warm:  # a cached computation every child would repeat (the apiserver's schemas)
                getattr(loaded, warm)()
        except Exception as e:  # a child importing it would fail the same way, and say so itself
            print(f"zygote: cannot preload {name}: {e}", file=sys.stderr)
    global _command
    if "isthmus.cli.main" in sys.modules:  # typer builds the click command tree on every call: once, here
        with contextlib.suppress(Exception):
            import typer.main

            cli = sys.modules["isthmus.cli.main"]
            for name in cli.ALL:  # a zygote forked from a component holds only that component's command
                importlib.import_module(f"isthmus.cli.{name}")
            _command = typer.main.get_command(cli.app)
        if _on(WARM_ENV):
            with contextlib.suppress(Exception):  # an optimisation: a child that runs it cold works the same
                _warm(_command)
    # Children must not inherit a loop, threads or logging handlers: the preload only imports.
    gc.collect()
    _fill_free_chunks()
    _fill_free_blocks()
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    me = os.getpid()
    _send(sock, {"ready": me})
    callers = _Callers(sock)
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    os.read(wake_r, 512)
                callers.reap()
                continue
            caller = key.fileobj
            assert isinstance(caller, socket.socket)
            try:
                data, fds, _, _ = socket.recv_fds(caller, MAX_MESSAGE, 4)
            except InterruptedError:
                continue
            except OSError:
                data, fds = b"", []
            if not data:  # this caller is gone
                selector.unregister(caller)
                if not callers.gone(caller):
                    return  # nobody is left to serve
                continue
            try:
                request = json.loads(data)
            except ValueError:
                for fd in fds:
                    os.close(fd)
                continue
            seq = request.get("seq")
            ours = theirs = None
            try:
                cwd = request.get("cwd")
                if cwd and not os.path.isdir(cwd):
                    raise FileNotFoundError(2, f"no such directory: {cwd}")
                if not fds or not forkable(request.get("argv") or []):
                    raise ValueError("a request needs an isthmus argv and an output fd")
                if request.get("client"):  # a caller of its own for the child (kube-lite: its pods)
                    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                    request["client_fd"] = theirs.fileno()
                _fill_free_blocks(rounds=1, unused_pools=False)  # what serving requests freed since
                pid = _fork_child(request, fds[0], fds[1] if len(fds) > 1 else None)
            except OSError as e:
                if ours is not None:
                    ours.close()
                _send(caller, {"seq": seq, "error": e.strerror or str(e), "errno": e.errno or 0})
            except ValueError as e:
                _send(caller, {"seq": seq, "error": str(e), "errno": 22})
            else:
                callers.started(pid, caller, bool(request.get("pdeathsig")))
                if ours is not None:
                    callers.add(ours)
                    selector.register(ours, selectors.EVENT_READ)
                    _send(ours, {"ready": me})
                _send(caller, {"seq": seq, "pid": pid})
            finally:
                if theirs is not None:
                    theirs.close()
                for fd in fds:
                    os.close(fd)


class _Callers:
    """The zygote's callers: the one that started it, and the children it gave a connection of
    their own (`Zygote.spawn(client=True)`: each kube-lite forks its pods here, so all of them
    share one zygote's pages). A child's exit goes to the caller that asked for it. A caller that
    goes away takes its `pdeathsig` children along (SIGTERM, as their parent's death would); the
    zygote serves until its last caller is gone, so the pods of a running kube-lite outlive a
    supervisor that crashed (the parts do)."""

    def __init__(self, first: socket.socket) -> None:
        self.owner: dict[int, socket.socket] = {}
        self.bound: dict[socket.socket, set[int]] = {first: set()}
        """Every open caller, with its `pdeathsig` children."""

    def add(self, sock: socket.socket) -> None:
        self.bound[sock] = set()

    def started(self, pid: int, caller: socket.socket, pdeathsig: bool) -> None:
        self.owner[pid] = caller
        if pdeathsig:
            self.bound[caller].add(pid)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            caller = self.owner.pop(pid, None)
            if caller is not None and caller in self.bound:
                self.bound[caller].discard(pid)
                _send(caller, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    def gone(self, caller: socket.socket) -> bool:
        """Forget a caller that hung up; False when none is left."""
        for pid in self.bound.pop(caller, set()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in [p for p, c in self.owner.items() if c is caller]:
            del self.owner[pid]  # still reaped (waitpid(-1)); nobody to tell
        caller.close()
        return bool(self.bound)


def main(argv: Sequence[str]) -> int:
    fd, preload, pdeathsig = -1, "", False
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--fd":
            fd = int(rest.pop(0))
        elif arg == "--preload":
            preload = rest.pop(0)
        elif arg == "--pdeathsig":
            pdeathsig = True
        # anything else only names the zygote in `ps`
    if fd < 0:
        print("usage: python -m isthmus.local.zygote --fd N [--preload a,b] [--pdeathsig] [title...]",
              file=sys.stderr)
        return 2
    if pdeathsig and _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    serve(sock, [m for m in preload.split(",") if m])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
