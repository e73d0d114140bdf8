"""Container probes as the kubelet's prober runs them: httpGet, tcpSocket and exec.

One :class:`Prober` per probe of a running container: it waits ``initialDelaySeconds``, then
probes every ``periodSeconds`` (each attempt bounded by ``timeoutSeconds``) and flips its result
after ``successThreshold`` successes or ``failureThreshold`` failures in a row (kube's defaults: 10,
1, 1, 3; readiness starts failed, liveness succeeded, startup failed). What a failure says is
worded as the kubelet words it, for the ``Unhealthy`` Event.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

__all__ = ["ExecRunner", "ProbeResult", "Prober", "SocketFactory", "probe_once", "resolve_port"]

USER_AGENT = "kube-probe/1.32"
MAX_OUTPUT = 10 * 1024
PROBE_SLACK = 1.0
"""Seconds past timeoutSeconds before a probe that has not ended is given up as failed (the exec
handler needs a moment to reap a command it killed)."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: bool
    message: str = ""


SocketFactory = Callable[[int, int], socket.socket]
"""(family, type) → an unconnected socket made where the kubelet probes from: in runc mode the
node's network namespace (a socket keeps the namespace it was made in), so httpGet and tcpSocket
probes reach the Pod's IP as a kubelet on that node does. None: this process's own namespace."""
ExecRunner = Callable[[Sequence[str], float], Awaitable[ProbeResult]]
"""(command, seconds) → the result of running it in the container (runc mode: `runc exec`)."""


def resolve_port(port: Any, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports (kube's findPortByName)."""
    if isinstance(port, int):
        return port
    text = str(port)
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p["containerPort"])
    raise ValueError(f"couldn't find port: {text} in {container.get('name')}")


def _reason(e: OSError | None) -> str:
    """Go's wording of a connect error: the errno's text, lower case ("connection refused")."""
    if e is not None and e.errno:
        return os.strerror(e.errno).lower()
    return str(e).lower()


def _connector(factory: SocketFactory | None) -> aiohttp.TCPConnector | None:
    if factory is None:
        return None
    return aiohttp.TCPConnector(socket_factory=lambda addr: factory(addr[0], addr[1]), force_close=True)


async def _http(spec: Mapping[str, Any], host: str, container: Mapping[str, Any], seconds: float,
                factory: SocketFactory | None = None) -> ProbeResult:
    scheme = str(spec.get("scheme") or "HTTP").lower()
    port = resolve_port(spec.get("port"), container)
    path = str(spec.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    host = str(spec.get("host") or host)
    url = f"{scheme}://{host}:{port}{path}"
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    for h in spec.get("httpHeaders") or []:
        headers[str(h.get("name"))] = str(h.get("value") or "")
    ctx: ssl.SSLContext | bool = False if scheme == "https" else True  # kube does not verify probes
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds),
                                         connector=_connector(factory)) as session:
            async with session.get(url, headers=headers, ssl=ctx, allow_redirects=True) as resp:
                await resp.content.read(MAX_OUTPUT)
                if 200 <= resp.status < 400:
                    return ProbeResult(True)
                return ProbeResult(False, f"HTTP probe failed with statuscode: {resp.status}")
    except TimeoutError:
        return ProbeResult(False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while '
                                  "awaiting headers)")
    except aiohttp.ClientConnectorError as e:
        return ProbeResult(False, f'Get "{url}": dial tcp {host}:{port}: connect: {_reason(e.os_error)}')
    except (aiohttp.ClientError, OSError) as e:
        return ProbeResult(False, f'Get "{url}": {e}')


async def _tcp(spec: Mapping[str, Any], host: str, container: Mapping[str, Any], seconds: float,
               factory: SocketFactory | None = None) -> ProbeResult:
    port = resolve_port(spec.get("port"), container)
    host = str(spec.get("host") or host)
    try:
        async with asyncio.timeout(seconds):
            if factory is None:
                _, writer = await asyncio.open_connection(host, port)
            else:
                writer = await _connect_with(factory, host, port)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return ProbeResult(True)
    except TimeoutError:
        return ProbeResult(False, f"dial tcp {host}:{port}: i/o timeout")
    except OSError as e:
        return ProbeResult(False, f"dial tcp {host}:{port}: connect: {_reason(e)}")


async def _connect_with(factory: SocketFactory, host: str, port: int) -> asyncio.StreamWriter:
    """A connection from a socket the factory made (numeric hosts only: a Pod IP or the probe's host)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = factory(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
        _, writer = await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    return writer


async def _exec(command: Sequence[str], env: Mapping[str, str], cwd: str | None, seconds: float) -> ProbeResult:
    if not command:
        return ProbeResult(False, "exec probe has no command")
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, env=dict(env), cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as e:
        return ProbeResult(False, f'exec: "{command[0]}": {e.strerror or e}')
    return await exec_result(proc, command, seconds)


async def exec_result(proc: asyncio.subprocess.Process, command: Sequence[str], seconds: float) -> ProbeResult:
    """An exec probe's or hook's verdict, as the kubelet gives it: exit 0 passes; a timeout kills the
    command; otherwise its output (bounded) is the message. Shared by process and runc containers."""
    try:
        async with asyncio.timeout(seconds):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return ProbeResult(False, f"command timed out: \"{' '.join(command)}\" timed out after {seconds:g}s")
    if proc.returncode == 0:
        return ProbeResult(True)
    text = out[:MAX_OUTPUT].decode("utf-8", "replace").strip()
    return ProbeResult(False, text or f"command \"{' '.join(command)}\" exited with {proc.returncode}")


async def probe_once(
    probe: Mapping[str, Any],
    *,
    host: str,
    container: Mapping[str, Any],
    env: Mapping[str, str],
    cwd: str | None = None,
    expand: Callable[[str], str] = lambda s: s,
    socket_factory: SocketFactory | None = None,
    exec_runner: ExecRunner | None = None,
) -> ProbeResult:
    """socket_factory: where httpGet/tcpSocket connect from (see SocketFactory); exec_runner: how
    an exec command runs in the container (None: a process here, with `env` and `cwd`)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        # Each handler bounds its own wait and words its timeout as the kubelet does; this bound
        # holds whatever else might hang (a name lookup, a peer that trickles its answer), so a
        # probe always ends as a failure after timeoutSeconds and failureThreshold stays a count.
        async with asyncio.timeout(timeout + PROBE_SLACK):
            if probe.get("httpGet"):
                return await _http(probe["httpGet"], host, container, timeout, socket_factory)
            if probe.get("tcpSocket"):
                return await _tcp(probe["tcpSocket"], host, container, timeout, socket_factory)
            if probe.get("exec"):
                command = [expand(str(c)) for c in probe["exec"].get("command") or []]
                if exec_runner is not None:
                    if not command:
                        return ProbeResult(False, "exec probe has no command")
                    return await exec_runner(command, timeout)
                return await _exec(command, env, cwd, timeout)
    except ValueError as e:
        return ProbeResult(False, str(e))
    except TimeoutError:
        return ProbeResult(False, f"probe did not finish within timeoutSeconds ({timeout:g}s)")
    return ProbeResult(False, "unsupported probe handler (kube-lite runs httpGet, tcpSocket and exec)")


class Prober:
    """Runs one probe until cancelled; ``on_change(ok, message)`` when its result flips."""

    def __init__(
        self,
        kind: str,
        probe: Mapping[str, Any],
        run: Callable[[], Any],
        on_change: Callable[[bool, str], None],
        on_failure: Callable[[str], None],
    ) -> None:
        self.kind = kind
        self.probe = probe
        self._run = run
        self.on_change = on_change
        self.on_failure = on_failure
        self.result = kind == "liveness"
        self.period = float(probe.get("periodSeconds") or 10)
        self.delay = float(probe.get("initialDelaySeconds") or 0)
        self.success_threshold = int(probe.get("successThreshold") or 1)
        self.failure_threshold = int(probe.get("failureThreshold") or 3)

    async def run(self) -> None:
        await asyncio.sleep(self.delay)
        successes = failures = 0
        while True:
            result: ProbeResult = await self._run()
            if result.ok:
                successes, failures = successes + 1, 0
                if not self.result and successes >= self.success_threshold:
                    self.result = True
                    self.on_change(True, "")
            else:
                successes, failures = 0, failures + 1
                self.on_failure(result.message)
                if failures >= self.failure_threshold:
                    if self.kind == "readiness":
                        if self.result:
                            self.result = False
                            self.on_change(False, result.message)
                    elif failures == self.failure_threshold:  # liveness/startup: the container is killed
                        self.result = False
                        self.on_change(False, result.message)
            await asyncio.sleep(self.period)
