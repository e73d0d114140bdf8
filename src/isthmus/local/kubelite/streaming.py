"""kubectl exec, attach and port-forward in runc mode: the kubelet's streaming API over WebSockets.

What kubectl (1.30+) speaks to the apiserver, and the apiserver passes to the node, is the
channel protocol of Kubernetes' WebSocket streams (``v5.channel.k8s.io``, ``v4.channel.k8s.io``):
each binary message starts with one byte naming its channel.

- exec and attach: 0 stdin, 1 stdout, 2 stderr, 3 error (a ``metav1.Status`` as JSON when the
  command ends: ``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and a cause
  ``ExitCode`` holding the code, which kubectl exits with), 4 resize (``{"Width", "Height"}``);
  v5 adds the close signal (a message ``[255, channel]``: the client's stdin is done). exec runs
  ``runc exec`` in the container (its env, user, capabilities, cwd), with a terminal when asked
  (runc's, fed by a pty of kube-lite's). attach follows what the container prints (its log)
  until it ends; its stdin is not attachable (kube-lite starts containers with stdin closed).
- port-forward (``ports=P1,P2``): per port a data channel (2i) and an error channel (2i+1), each
  opened with the port as two little-endian bytes; the connection is made inside the Pod's network
  namespace to 127.0.0.1:P (as containerd's port forward enters the sandbox's namespace).

kubectl port-forward tunnels SPDY through its WebSocket: spdy.py serves that. Plain SPDY
upgrades (kubectl's fallback when a WebSocket is refused) are not spoken.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import struct
import termios
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

if TYPE_CHECKING:
    from isthmus.local.kubelite.logs import ContainerLog
    from isthmus.local.kubelite.runc import RuncContainer, RuncPod

__all__ = ["EXEC_PROTOCOLS", "PORTFORWARD_PROTOCOLS", "attach", "exec_in", "exit_status", "port_forward"]

log = logging.getLogger(__name__)

V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
EXEC_PROTOCOLS = (V5, V4)
PORTFORWARD_PROTOCOLS = (V4, "portforward.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
CHUNK = 32 * 1024


def exit_status(code: int, command: Sequence[str]) -> dict[str, Any]:
    """The error channel's Status when an exec ends (kubelet's remotecommand.ServeExec)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {}, "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command [{' '.join(command)}], "
                   f"exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def failure(message: str) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500}


async def _send(ws: web.WebSocketResponse, channel: int, data: bytes) -> None:
    if not ws.closed:
        await ws.send_bytes(bytes([channel]) + data)


async def _finish(ws: web.WebSocketResponse, status: dict[str, Any]) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        await _send(ws, ERROR, json.dumps(status).encode())
        await ws.close()


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true")


async def exec_in(request: web.Request, runc_pod: RuncPod, container: RuncContainer) -> web.WebSocketResponse:
    """`kubectl exec`: the command in the container, its streams on the WebSocket's channels."""
    command = request.query.getall("command", [])
    want_stdin, tty = _flag(request, "stdin"), _flag(request, "tty")
    ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, max_msg_size=0)
    await ws.prepare(request)
    if not command:
        await _finish(ws, failure("you must specify at least one command for the container"))
        return ws
    runtime = runc_pod.node.runtime
    master = slave = -1
    try:
        if tty:
            master, slave = os.openpty()
            proc = await runtime.exec(container.id, command, tty=True, stdin=slave, stdout=slave, stderr=slave)
            os.close(slave)
            slave = -1
        else:
            proc = await runtime.exec(container.id, command,
                                      stdin=asyncio.subprocess.PIPE if want_stdin else None,
                                      stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as e:
        for fd in (master, slave):
            if fd >= 0:
                os.close(fd)
        await _finish(ws, failure(f"failed to exec in container: {e.strerror or e}"))
        return ws
    loop = asyncio.get_running_loop()
    pumps: list[asyncio.Task[None]] = []

    async def pump(reader: asyncio.StreamReader, channel: int) -> None:
        while data := await reader.read(CHUNK):
            await _send(ws, channel, data)

    async def pump_pty() -> None:
        while True:
            try:
                data = await loop.run_in_executor(None, os.read, master, CHUNK)
            except OSError:  # EIO: every holder of the terminal's other side is gone
                return
            if not data:
                return
            await _send(ws, STDOUT, data)

    def resize(payload: bytes) -> None:
        with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
            size = json.loads(payload)
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0))

    async def feed() -> None:
        """The client's messages: stdin, resizes, v5's close signal."""
        async for msg in ws:
            if msg.type != WSMsgType.BINARY or not msg.data:
                continue
            channel, data = msg.data[0], msg.data[1:]
            if channel == STDIN and want_stdin:
                if tty:
                    await loop.run_in_executor(None, os.write, master, data)
                elif proc.stdin is not None and not proc.stdin.is_closing():
                    proc.stdin.write(data)
                    with contextlib.suppress(ConnectionError):
                        await proc.stdin.drain()
            elif channel == RESIZE and tty:
                resize(data)
            elif channel == CLOSE and data[:1] == bytes([STDIN]):
                if tty:
                    await loop.run_in_executor(None, os.write, master, b"\x04")  # the terminal's end of file
                elif proc.stdin is not None:
                    proc.stdin.close()

    if tty:
        pumps.append(asyncio.create_task(pump_pty()))
    else:
        assert proc.stdout is not None and proc.stderr is not None
        pumps += [asyncio.create_task(pump(proc.stdout, STDOUT)), asyncio.create_task(pump(proc.stderr, STDERR))]
    feeding = asyncio.create_task(feed())
    try:
        code = await proc.wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await asyncio.gather(*pumps, return_exceptions=True)
    finally:
        feeding.cancel()
        for t in pumps:
            t.cancel()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if master >= 0:
            os.close(master)
    await _finish(ws, exit_status(code if code >= 0 else 128 - code, command))
    return ws


async def attach(request: web.Request, clog: ContainerLog | None, container: RuncContainer) -> web.WebSocketResponse:
    """`kubectl attach`: what the container prints from now on, until it ends."""
    ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, max_msg_size=0)
    await ws.prepare(request)
    if clog is None:
        await _finish(ws, failure("the container has no output stream"))
        return ws
    index = clog.end

    async def drain_client() -> None:
        async for _ in ws:
            pass

    client = asyncio.create_task(drain_client())
    try:
        while not clog.closed and container.returncode is None and not client.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await clog.wait(index)
            lines, index = clog.after(index)
            if lines:
                await _send(ws, STDOUT, b"".join(ln.data for ln in lines))
    finally:
        client.cancel()
    await _finish(ws, {"metadata": {}, "status": "Success"})
    return ws


async def port_forward(request: web.Request, netns_path: str) -> web.WebSocketResponse:
    """`portforward`: each asked port relayed to 127.0.0.1:<port> inside the Pod's namespace."""
    from isthmus.runtime import netns

    raw = request.query.getall("port", []) or ",".join(request.query.getall("ports", [])).split(",")
    try:
        ports = [int(p) for p in raw if p.strip()]
        if not ports or any(not 0 < p < 65536 for p in ports):
            raise ValueError
    except ValueError:
        raise web.HTTPBadRequest(text=f"invalid port list: {','.join(raw)}") from None
    ws = web.WebSocketResponse(protocols=PORTFORWARD_PROTOCOLS, max_msg_size=0)
    await ws.prepare(request)
    writers: dict[int, asyncio.StreamWriter] = {}
    tasks: list[asyncio.Task[None]] = []
    for i, port in enumerate(ports):
        prefix = struct.pack("<H", port)
        await _send(ws, 2 * i, prefix)
        await _send(ws, 2 * i + 1, prefix)
        try:
            reader, writer = await netns.open_connection_in(netns_path, "127.0.0.1", port)
        except OSError as e:
            await _send(ws, 2 * i + 1, f"error forwarding port {port} to pod: dial tcp 127.0.0.1:{port}: "
                                       f"connect: {os.strerror(e.errno).lower() if e.errno else e}".encode())
            continue
        writers[2 * i] = writer

        async def pump(r: asyncio.StreamReader = reader, channel: int = 2 * i) -> None:
            while data := await r.read(CHUNK):
                await _send(ws, channel, data)

        tasks.append(asyncio.create_task(pump()))

    async def feed() -> None:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY and msg.data:
                w = writers.get(msg.data[0])
                if w is not None:
                    w.write(msg.data[1:])
                    with contextlib.suppress(ConnectionError):
                        await w.drain()

    feeding = asyncio.create_task(feed())
    try:
        await asyncio.wait([feeding, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if tasks and not feeding.done():  # the pod closed its side: give the client the rest, then end
            await asyncio.wait(tasks, timeout=1.0)
    finally:
        feeding.cancel()
        for t in tasks:
            t.cancel()
        for w in writers.values():
            w.close()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.close()
    return ws
