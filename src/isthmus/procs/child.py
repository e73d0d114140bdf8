"""A forked child's set-up: become the requested command in a process forked from this one.

Used by the zygote for every child it forks (`server.py`), and by `fork_command` for a caller that
has imported what the command needs already. The child is indistinguishable from one started with
``python -m <module> ...`` where it matters: its own session and process group, stdin /dev/null,
stdout and stderr to the caller's descriptor, the caller's environment (``os.environ`` replaced),
working directory and ``sys.argv``, and its ``/proc/<pid>/cmdline`` and ``/proc/<pid>/environ``
are the ones it would have had (``PR_SET_MM_MAP``, no privilege needed), so ``ps`` and identity
checks see the same command. What it then runs is the caller's `Entry`.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import gc
import io
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from isthmus.procs.entry import Entry, Program, enabled

__all__ = ["CLIENT_ENV", "LISTEN_ENV", "UNKNOWN_EXIT", "ForkedCommand", "exit_code", "fork_child", "fork_command", "set_cmdline"]

CLIENT_ENV = "ISTHMUS_ZYGOTE_FD"
"""Set in a child given a connection of its own to the zygote (`Zygote.spawn(client=True)`)."""
CLIENT_FD = 3
LISTEN_ENV = "ISTHMUS_LISTEN_FD"
"""Set in a child given a listening socket (`Zygote.spawn(listen_fd=...)`, socket activation): its fd."""
LISTEN_FD = 3
UNKNOWN_EXIT = -int(signal.SIGKILL)
"""The exit code of a child whose zygote died before reporting it (kube reports 137 for those)."""

_PR_SET_PDEATHSIG = 1
_PR_SET_MM = 35
_PR_SET_MM_MAP = 14

libc: Any = None
with contextlib.suppress(OSError, AttributeError):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sbrk.restype = ctypes.c_void_p


def exit_code(pid: int) -> int | None:
    """The exit code of our child `pid` once it has ended (reaping it), None while it runs."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: its code is lost
        return UNKNOWN_EXIT
    return os.waitstatus_to_exitcode(status) if done else None



class ForkedCommand:
    """What `subprocess.Popen` offers for a command `fork_command` started: pid, poll(), wait(),
    send_signal(), returncode."""

    def __init__(self, pid: int, argv: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(argv)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = exit_code(self.pid)
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


def fork_command(argv: Sequence[str], entry: Entry, *, env: Mapping[str, str], out_fd: int,
                 pdeathsig: bool = False) -> ForkedCommand | None:
    """Run `python -m <module> ...` (`argv`, `entry`'s) in a child forked from this process, as a
    zygote's child runs (own session, /proc identity, stdin /dev/null, stdout and stderr to `out_fd`).

    For a process that has imported what the command needs already (`isthmus up` starting its
    supervisor): the child skips the interpreter's start and the imports. None when it cannot
    (the zygote is off, `argv` is not forkable, or a thread runs: forking then is unsafe); the
    caller then execs."""
    if not enabled() or not entry.forkable(argv) or threading.active_count() > 1:
        return None
    request = {"argv": list(argv), "env": dict(env), "pdeathsig": pdeathsig}
    return ForkedCommand(fork_child(request, out_fd, entry), argv)



def set_pdeathsig() -> None:  # pragma: no cover - runs between fork and exec
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def own_session(pdeathsig: bool, parent: int) -> None:  # pragma: no cover - runs in a forked child
    """A forked child's own session, and with `pdeathsig` a SIGTERM when `parent` dies (it exits at
    once if `parent` died before that was set)."""
    os.setsid()
    if pdeathsig and libc is not None:
        set_pdeathsig()
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


def set_cmdline(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Point the kernel's view of this process's arguments and environment (what
    ``/proc/self/cmdline`` and ``environ`` read) at new NUL-separated copies. PR_SET_MM_MAP needs
    no privilege; False where the kernel refuses it (then ``ps`` shows the zygote's command)."""
    if libc is None:
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
        field(26), field(27), field(45), field(46), field(47), libc.sbrk(0), field(28),
        ctypes.addressof(arg_buf), ctypes.addressof(arg_buf) + len(args),
        ctypes.addressof(env_buf), ctypes.addressof(env_buf) + len(envs),
        ctypes.addressof(aux_buf), len(auxv), 0xFFFFFFFF,
    )
    if libc.prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0) != 0:
        return False
    _kept[:] = [arg_buf, env_buf]  # the kernel reads them from here for the process's lifetime
    return True


def fault_tracebacks() -> None:
    """A fatal signal (an abort() in a C extension, a segfault) writes every thread's Python
    traceback to fd 2 (the zygote's, then each child's log) instead of dying without a word."""
    with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation, RuntimeError):
        faulthandler.enable(sys.stderr, all_threads=True)



def fork_child(request: dict[str, Any], out_fd: int, entry: Entry, program: Program | None = None,
               listen_fd: int | None = None) -> int:
    """Fork the requested process (`_child`) to run `entry`'s `program` (loaded in the child when
    None: not prepared); returns its pid once it has settled who it is."""
    started_r, started_w = os.pipe()
    me = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(started_r)
        if listen_fd is not None:
            request["listen_fd"] = listen_fd
        _child(request, out_fd, me, started_w, entry, program)
    os.close(started_w)
    with contextlib.suppress(OSError):
        os.read(started_r, 1)  # EOF once the child settled who it is (or died)
    os.close(started_r)
    return pid


def _child(request: dict[str, Any], out_fd: int, zygote_pid: int, started: int,  # pragma: no cover
           entry: Entry, program: Program | None) -> None:
    """Become the requested process (forked); never returns. Its identity (session, cmdline,
    working directory, parent-death signal) is settled before `started` is closed, so the pid the
    caller gets can be signalled by process group and recognised by its cmdline at once."""
    code = 1
    try:
        own_session(bool(request.get("pdeathsig")), zygote_pid)
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
        fault_tracebacks()
        import random
        import tempfile

        gc.enable()
        random.seed()  # every child would otherwise draw the zygote's sequence
        tempfile.tempdir = None
        sys.argv = [entry.main_path(), *argv[3:]]  # as -m sets it
        try:
            (program or entry.load()).run(argv[3:])
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

