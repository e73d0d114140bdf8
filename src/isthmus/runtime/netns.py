"""Named network namespaces, and sockets and processes made inside them.

Namespaces are named as `ip netns` names them (a bind mount of the namespace at
/run/netns/<name>, /run/netns itself a shared mount point), so `ip netns exec`, `ip -n`, CNI
plugins and users' tools all find them. Creating and deleting shell out to `ip netns`: it does the
mount dance (shared /run/netns, bind mount, lazy unmount) that every other tool expects, in ~2 ms.

The calling process never leaves its own namespace. A socket is made inside another by a
short-lived thread that setns()es to it, makes the socket and ends; the socket stays in the
namespace it was made in for its whole life, whatever thread uses it later (the kernel binds a
socket to a namespace at creation). A subprocess enters the namespace in its preexec hook (after
fork, before exec), so it starts there, as `ip netns exec` would start it but without a process
of its own in between.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from isthmus.runtime.sockets import connect

__all__ = [
    "NETNS_DIR", "Completed", "NetnsError", "add", "add_many", "call_in", "datagram_in", "delete", "delete_many",
    "exists", "listening_socket_in", "names", "open_connection_in", "path", "run_in", "setns", "setns_preexec", "socket_in",
    "start_server_in",
]

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
_libc.setns.restype = ctypes.c_int


class NetnsError(RuntimeError):
    """A namespace could not be made, entered or removed (the message says which and why)."""


def path(name: str) -> str:
    """/run/netns/<name> (the name is checked: it becomes a file name)."""
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise NetnsError(f"invalid network namespace name {name!r}")
    return f"{NETNS_DIR}/{name}"


def exists(name: str) -> bool:
    """Whether the namespace is there (a mount at its path; a left-over plain file is not one)."""
    p = path(name)
    return os.path.exists(p) and os.path.ismount(p)


def names() -> list[str]:
    """Every named namespace on the machine."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _ip(args: Sequence[str], batch: str | None = None) -> None:
    cmd = ["ip", *args] if batch is None else ["ip", *args, "-batch", "-"]
    try:
        done = subprocess.run(cmd, input=batch, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise NetnsError("ip (iproute2) is not installed") from None
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: {done.stderr.strip() or f'exit {done.returncode}'}")


def add(name: str) -> str:
    """Create the namespace unless it exists; its path."""
    p = path(name)
    if not exists(name):
        _ip(["netns", "add", name])
    return p


def add_many(wanted: Sequence[str]) -> list[str]:
    """Create the namespaces that do not exist yet, with one `ip` process; the ones it created."""
    missing = [n for n in wanted if not exists(n)]
    if missing:
        _ip([], "".join(f"netns add {path(n).rsplit('/', 1)[1]}\n" for n in missing))
    return missing


def delete(name: str) -> bool:
    """Remove the namespace (its devices go with it when nothing else holds it); False if absent."""
    p = path(name)
    if not os.path.lexists(p):
        return False
    _ip(["netns", "delete", name])
    return True


def delete_many(names_: Sequence[str]) -> list[str]:
    """Remove those of the namespaces that exist, with one `ip` process; the ones removed."""
    present = [n for n in names_ if os.path.lexists(path(n))]
    if present:
        _ip([], "".join(f"netns delete {n}\n" for n in present))
    return present


def setns(netns_path: str) -> None:
    """Move the CALLING THREAD into the namespace at `netns_path` (only for threads that end next,
    or a child between fork and exec)."""
    fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {netns_path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def setns_preexec(netns_path: str) -> Callable[[], None]:
    """A `preexec_fn` for subprocess/asyncio: the child enters the namespace before exec."""

    def enter() -> None:
        setns(netns_path)

    return enter


def call_in(netns_path: str, fn: Callable[..., T], *args: Any) -> T:
    """Run `fn(*args)` on a fresh thread inside the namespace and return its result (or raise its
    error). The thread ends right after, so no thread of the process stays in the namespace."""
    out: list[T] = []
    err: list[BaseException] = []

    def target() -> None:
        try:
            setns(netns_path)
            out.append(fn(*args))
        except BaseException as e:
            err.append(e)

    thread = threading.Thread(target=target, name=f"netns {os.path.basename(netns_path)}", daemon=True)
    thread.start()
    thread.join()
    if err:
        raise err[0]
    return out[0]


def socket_in(netns_path: str, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM,
              proto: int = 0) -> socket.socket:
    """A socket that lives in the namespace at `netns_path` (bind, listen and connect act there)."""
    return call_in(netns_path, socket.socket, family, type, proto)


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


@dataclass(frozen=True)
class Completed:
    """What a command run in a namespace did."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    def check(self) -> Completed:
        if self.returncode != 0:
            msg = self.stderr.decode(errors="replace").strip() or f"exit {self.returncode}"
            raise NetnsError(f"{' '.join(self.argv)}: {msg}")
        return self


async def run_in(netns_path: str | None, argv: Sequence[str], *, input: bytes | None = None,
                 env: Mapping[str, str] | None = None, timeout: float | None = None) -> Completed:  # noqa: ASYNC109
    """Run a command inside the namespace (None: here) and collect its output. On timeout the
    command is killed and TimeoutError raised."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        preexec_fn=setns_preexec(netns_path) if netns_path else None,
    )
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await proc.communicate(input)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    assert proc.returncode is not None
    return Completed(tuple(argv), proc.returncode, stdout, stderr)


async def open_connection_in(netns_path: str, host: str, port: int, *, timeout: float = 5.0,  # noqa: ASYNC109
                             **kw: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """`asyncio.open_connection` from inside the namespace (a numeric host)."""
    sock = socket_in(netns_path, _family(host), socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setblocking(False)
        # runtime.sockets.connect: uvloop's sock_connect would resolve even a literal IP on a thread.
        await connect(asyncio.get_running_loop(), sock, (host, port), timeout)
        return await asyncio.open_connection(sock=sock, **kw)
    except BaseException:
        sock.close()
        raise


def listening_socket_in(netns_path: str, host: str, port: int, *, backlog: int = 1024,
                        reuse_port: bool = False) -> socket.socket:
    """A bound, listening, non-blocking TCP socket inside the namespace."""
    sock = socket_in(netns_path, _family(host), socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def start_server_in(netns_path: str, cb: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
                          host: str, port: int, **kw: Any) -> asyncio.Server:
    """`asyncio.start_server` listening inside the namespace."""
    sock = listening_socket_in(netns_path, host, port)
    try:
        return await asyncio.start_server(cb, sock=sock, **kw)
    except BaseException:
        sock.close()
        raise


async def datagram_in(netns_path: str, factory: Callable[[], asyncio.DatagramProtocol], *,
                      local_addr: tuple[str, int] | None = None, remote_addr: tuple[str, int] | None = None,
                      ) -> tuple[asyncio.DatagramTransport, asyncio.DatagramProtocol]:
    """`loop.create_datagram_endpoint` for a UDP socket inside the namespace."""
    host = (local_addr or remote_addr or ("0.0.0.0", 0))[0]
    sock = socket_in(netns_path, _family(host), socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setblocking(False)
        if local_addr is not None:
            sock.bind(local_addr)
        if remote_addr is not None:
            sock.connect(remote_addr)
        return await asyncio.get_running_loop().create_datagram_endpoint(factory, sock=sock)
    except BaseException:
        sock.close()
        raise
