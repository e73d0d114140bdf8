"""A fork server for processes that all run one Python program: the caller's side.

Every part of a local clusterset is a Python process that imports the same libraries (aiohttp,
lightkube, pydantic, the API models): about 45 MB of private memory and half a second of CPU each
before it does anything, thirty-odd times over on a machine that also runs the user's work. The
local clusterset therefore starts them the way Android starts apps and `multiprocessing` its
forkserver workers: one process (the zygote) imports everything once, freezes it out of the
garbage collector's reach (`gc.freeze`), and forks a child per process to run; the children share
the imported pages copy-on-write and start in milliseconds.

What the zygote imports (`preload`) and what its children run (an `Entry`: the ``-m`` module and
the `Program` that runs it, entry.py) are its caller's to say, as
`multiprocessing.set_forkserver_preload` leaves the preload to its caller: this package imports
nothing above it. The zygote's own loop is server.py (``python -m isthmus.procs.zygote`` in
``ps``); how a forked child becomes its command is child.py.

A forked child is indistinguishable from one started with `python -m <module> ...` where it
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
local clusterset's supervisor gives one to each kube-lite, which forks its pods there, so every
process of a local clusterset shares one zygote's pages. A child can instead be handed a listening
socket (``listen_fd``: fd 3 and ``ISTHMUS_LISTEN_FD``): the supervisor starts the web view that way
on its first connection (socket activation). A caller that goes away (EOF) takes its ``pdeathsig``
children (kube-lite's pods) along with SIGTERM, as their parent's death would; the others (the
supervisor's parts, which outlive a crashed supervisor) keep running, and the zygote serves until
its last caller is gone. Should the zygote itself die, its ``pdeathsig`` children die with it
(their kube-lite starts them again).

Only argv of the form ``[sys.executable, "-m", <the entry's module>, ...]`` is forked
(`Entry.forkable`); anything else is exec'ed as before. ``ISTHMUS_ZYGOTE=0`` turns the zygote off
(`enabled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from isthmus.procs.child import CLIENT_ENV, UNKNOWN_EXIT, exit_code, own_session, set_cmdline, set_pdeathsig
from isthmus.procs.entry import Entry
from isthmus.procs.server import MAX_MESSAGE, main, serve

__all__ = ["Zygote", "ZygoteProcess"]

log = logging.getLogger(__name__)
log = logging.getLogger(__name__)

READY_TIMEOUT = 30.0


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




class _ForkedZygote:
    """The part of `asyncio.subprocess.Process` a Zygote uses, for a zygote this process forked
    itself (`Zygote.fork_now`): no event loop's child watcher knows it, so it is reaped here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        if self._code is None:
            self._code = exit_code(self.pid)
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
    result the module caches; `entry`: what the children run (``python -m <module>`` commands, by
    its program); `title`: extra arguments naming the zygote in ``ps`` (and the state dir, so
    identity checks that look for it find it); `pdeathsig`: the zygote dies with its caller and
    every child with the zygote (kube-lite's pods)."""

    def __init__(self, preload: Sequence[str], entry: Entry, *, title: Sequence[str] = (), pdeathsig: bool = False,
                 env: Mapping[str, str] | None = None) -> None:
        self.preload = tuple(preload)
        self.entry = entry
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
        return [sys.executable, "-m", "isthmus.procs.zygote", "--fd", str(fd), "--preload", ",".join(self.preload),
                *self.entry.args(), *(["--pdeathsig"] if self.pdeathsig else []), *self.title]

    def forkable(self, argv: Sequence[str]) -> bool:
        """True for a command this zygote can become (`Entry.forkable`); others are exec'ed."""
        return self.entry.forkable(argv)

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
                own_session(self.pdeathsig, parent)
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
                serve(theirs, self.preload, self.entry)
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
                    env=self.env, preexec_fn=set_pdeathsig if self.pdeathsig else None,
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
        if not self.forkable(argv):
            raise ValueError(f"not a {self.entry.module} command of this interpreter: {argv[:3]}")
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



if __name__ == "__main__":  # the zygote itself: `Zygote.argv`
    sys.exit(main(sys.argv[1:]))
