"""The zygote's side of the fork server: import the preload once, freeze it, fork on request.

Run as ``python -m isthmus.procs.zygote --fd N --preload a,b --module M --program P [--pdeathsig]
[title...]`` (`main`), or called in a process forked by its caller (`Zygote.fork_now`): `serve`
imports the preload, lets the caller's `Program` prepare what every child would build for itself,
takes the free memory a child's first allocations would otherwise copy shared pages for, freezes
everything out of the garbage collector's reach (`gc.freeze`), then forks a child per request
(`child.py`) and reports its exit to the caller that asked for it, until its last caller is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

from isthmus.procs.child import fault_tracebacks, fork_child, libc, set_pdeathsig
from isthmus.procs.entry import Entry, Program

__all__ = ["MAX_MESSAGE", "main", "serve"]

MAX_MESSAGE = 1 << 20


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the caller is gone: the loop ends on EOF
        sock.send(json.dumps(msg).encode())



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
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return 0
    malloc, free, sbrk = libc.malloc, libc.free, libc.sbrk
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



def serve(sock: socket.socket, preload: Sequence[str], entry: Entry) -> None:
    """The zygote's loop: import, let `entry`'s program prepare, freeze, then fork on request and
    report exits until its last caller hangs up."""
    fault_tracebacks()
    gc.disable()  # no collections while importing: freed holes in shared pages would be reused, and copied
    for name in preload:
        module, _, warm = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            if warm:  # a cached computation every child would repeat (the apiserver's schemas)
                getattr(loaded, warm)()
        except Exception as e:  # a child importing it would fail the same way, and say so itself
            print(f"zygote: cannot preload {name}: {e}", file=sys.stderr)
    program: Program | None = None
    try:
        program = entry.load()
    except Exception as e:  # each child loads it then, and says why it cannot
        print(f"zygote: cannot load {entry.program}: {e}", file=sys.stderr)
    if program is not None:
        with contextlib.suppress(Exception):  # an optimisation: a child that runs unprepared works the same
            program.prepare()
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
                if not fds or not entry.forkable(request.get("argv") or []):
                    raise ValueError(f"a request needs a `python -m {entry.module}` argv and an output fd")
                if request.get("client"):  # a caller of its own for the child (kube-lite: its pods)
                    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                    request["client_fd"] = theirs.fileno()
                _fill_free_blocks(rounds=1, unused_pools=False)  # what serving requests freed since
                pid = fork_child(request, fds[0], entry, program, fds[1] if len(fds) > 1 else None)
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
    """``python -m isthmus.procs.zygote``: serve on the inherited socket `--fd`."""
    fd, preload, pdeathsig, module, program = -1, "", False, "", ""
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--fd":
            fd = int(rest.pop(0))
        elif arg == "--preload":
            preload = rest.pop(0)
        elif arg == "--module":
            module = rest.pop(0)
        elif arg == "--program":
            program = rest.pop(0)
        elif arg == "--pdeathsig":
            pdeathsig = True
        # anything else only names the zygote in `ps`
    if fd < 0 or not module or not program:
        print("usage: python -m isthmus.procs.zygote --fd N [--preload a,b] --module M --program pkg.mod:attr"
              " [--pdeathsig] [title...]", file=sys.stderr)
        return 2
    if pdeathsig:
        set_pdeathsig()
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    serve(sock, [m for m in preload.split(",") if m], Entry(module, program))
    return 0

