"""TCP relays between a network namespace and the host's loopback: the clusterset's only doors.

In runc mode the apiservers stay on the host's 127.0.0.1, as a cloud's control plane sits outside
the nodes, but nothing in the clusterset's namespaces can reach the host (no route, by design).
A relay listens in the fabric namespace on 10.255.0.1:<P> (the listening socket is made there by
a thread that entered it, see netns.socket_in) and connects each accepted connection to
127.0.0.1:<P> from the host's namespace, where this process lives. The bytes are relayed by the
VIP proxy's TCP relay (proxy/tcp.py: half-close, backpressure, reset on failure), one backend
per listener. TLS passes through untouched; the apiserver sees the relay as its client.

The other way (`publish`), a relay listens on the host's 127.0.0.1 and connects from inside the
namespace: `up` pushes images to the fabric's registry (10.255.0.2:5000) through such a door.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from isthmus.runtime import netns

if TYPE_CHECKING:
    from isthmus.proxy.tcp import TcpListener

__all__ = ["Relay", "RelaySpec", "RelaySpecError"]

log = logging.getLogger(__name__)


class RelaySpecError(ValueError):
    """A malformed ``ADDR:PORT=HOST:PORT`` (the message is for users)."""


def _addr(text: str, what: str, spec: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RelaySpecError(f"{spec!r}: the {what} must be ADDRESS:PORT with a port in 1-65535")
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        raise RelaySpecError(f"{spec!r}: {host!r} is not an IP address") from None
    return host, int(port)


@dataclass(frozen=True)
class RelaySpec:
    """Listen on `listen` inside the namespace, connect to `target` from the host's."""

    listen: tuple[str, int]
    target: tuple[str, int]

    @classmethod
    def parse(cls, text: str) -> RelaySpec:
        listen, sep, target = text.partition("=")
        if not sep:
            raise RelaySpecError(f"{text!r}: expected LISTEN_ADDR:PORT=TARGET_ADDR:PORT")
        return cls(_addr(listen, "listen address", text), _addr(target, "target", text))

    def __str__(self) -> str:
        return f"{self.listen[0]}:{self.listen[1]}={self.target[0]}:{self.target[1]}"


def _in_netns_listener(netns_path: str, target: tuple[str, int], connect_timeout: float) -> TcpListener:
    """A proxy listener whose upstream connections are made inside the namespace (a thread that
    entered it makes each socket, ~0.1 ms: fine for the few doors into the clusterset)."""
    from isthmus.proxy.balancer import Balancer
    from isthmus.proxy.metrics import ListenerStats
    from isthmus.proxy.table import Backend
    from isthmus.proxy.tcp import TcpListener, _Upstream
    from isthmus.runtime.sockets import connect

    class InNetns(TcpListener):
        async def open_upstream(self, backend: Backend, down: Any) -> _Upstream:
            loop = asyncio.get_running_loop()
            family = socket.AF_INET6 if ":" in backend.host else socket.AF_INET
            sock = netns.socket_in(netns_path, family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            try:
                sock.setblocking(False)
                await connect(loop, sock, backend, self.connect_timeout)
                up = _Upstream(self, down)
                await loop.create_connection(lambda: up, sock=sock)
            except BaseException:
                sock.close()
                raise
            return up

    return InNetns(Balancer([Backend(*target)]), ListenerStats(), connect_timeout=connect_timeout)


class Relay:
    """The doors of one namespace, as a component (`run_component`): `listen` relays listen inside
    the namespace and connect from the host's (the apiservers into the fabric), `publish` relays
    listen on the host and connect from inside (the fabric's registry onto the host's loopback).
    Ready once every listener is up. Listening inside waits up to `wait` seconds for the namespace
    and its addresses to appear (the supervisor may start the relay while `up` still sets the
    fabric up); SIGTERM meanwhile still stops it at once."""

    def __init__(self, netns_path: str, listen: list[RelaySpec], publish: list[RelaySpec] | None = None, *,
                 wait: float = 30.0, connect_timeout: float = 2.0) -> None:
        self.netns_path = netns_path
        self.listen = listen
        self.publish = publish or []
        self.bind_wait = wait
        self.connect_timeout = connect_timeout
        self._listeners: list[TcpListener] = []
        self._ready = False
        self._task: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Where the listeners listen, `listen` ones first (a port 0 becomes the one the kernel gave)."""
        out: list[tuple[str, int]] = []
        for listener in self._listeners:
            out += [s.getsockname()[:2] for s in listener.sockets]
        return out

    async def _bind_waiting(self, spec: RelaySpec) -> socket.socket:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.bind_wait
        while True:
            try:
                return netns.listening_socket_in(self.netns_path, spec.listen[0], spec.listen[1])
            except OSError as err:
                # Absent namespace (ENOENT) or address not yet there (EADDRNOTAVAIL): `up` is on it.
                if loop.time() >= deadline:
                    where = os.path.basename(self.netns_path)
                    raise OSError(err.errno, f"cannot listen on {spec.listen[0]}:{spec.listen[1]} in network "
                                             f"namespace {where}: {err.strerror or err}") from None
                await asyncio.sleep(0.2)

    @staticmethod
    def _bind_here(spec: RelaySpec) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in spec.listen[0] else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(spec.listen)
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as err:
            sock.close()
            raise OSError(err.errno, f"cannot listen on {spec.listen[0]}:{spec.listen[1]}: "
                                     f"{err.strerror or err}") from None
        return sock

    async def start(self) -> None:
        """Start listening in the background (binding may wait for the namespace): `serving()`
        returns once every listener is up, `wait()` raises if that fails."""
        self._task = asyncio.create_task(self._listen(), name="netrelay listen")

    async def serving(self) -> None:
        """Until every listener is up (or raise why one could not be)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def wait(self) -> None:
        await self.serving()
        await asyncio.Event().wait()  # then until stopped

    async def _serve(self, listener: TcpListener, sock: socket.socket, spec: RelaySpec, where: str) -> None:
        try:
            await listener.start(sock)
        except BaseException:
            sock.close()
            raise
        self._listeners.append(listener)
        log.info("relaying", extra={"listen": f"{spec.listen[0]}:{spec.listen[1]}", "listenIn": where,
                                    "target": f"{spec.target[0]}:{spec.target[1]}"})

    async def _listen(self) -> None:
        from isthmus.proxy.balancer import Balancer
        from isthmus.proxy.metrics import ListenerStats
        from isthmus.proxy.table import Backend
        from isthmus.proxy.tcp import TcpListener

        ns = os.path.basename(self.netns_path)
        for spec in self.listen:
            sock = await self._bind_waiting(spec)
            listener = TcpListener(Balancer([Backend(*spec.target)]), ListenerStats(),
                                   connect_timeout=self.connect_timeout)
            await self._serve(listener, sock, spec, ns)
        for spec in self.publish:
            await self._serve(_in_netns_listener(self.netns_path, spec.target, self.connect_timeout),
                              self._bind_here(spec), spec, "host")
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for listener in self._listeners:
            listener.close()
            listener.abort_all()
        self._listeners.clear()
