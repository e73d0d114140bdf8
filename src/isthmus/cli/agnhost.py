"""`isthmus agnhost` (hidden): the part of Kubernetes' e2e test image agnhost that Isthmus needs.

In runc mode the echo workload is a container like any other: the local registry's
``registry.k8s.io/e2e-test-images/agnhost:2.53`` is the Isthmus image with the entrypoint
``/agnhost`` → ``isthmus agnhost``, so a Pod written for the real agnhost (``args: [netexec,
--http-port=8080, --udp-port=9090]``) runs here unchanged. ``netexec`` serves the echo workload's
JSON (local/kubelite/echo.py: who answered — Pod, namespace, cluster — and the peer it saw) on
every address of the Pod's network namespace, TCP (HTTP/1.1) and UDP; ``pause`` waits for its
signal. agnhost's other flags are accepted and ignored.

Who it is: the Pod's name is ``$POD_NAME`` or the hostname (runc sets it to the Pod's name), its
namespace ``$POD_NAMESPACE`` or the ServiceAccount's namespace file, its cluster
``$ISTHMUS_CLUSTER`` — kube-lite in runc mode gives these three variables to the containers of
Pods annotated ``isthmus.io/workload: echo`` (what the annotation means there).

SIGTERM drains as the echo servers do (EchoServer.terminate: a short lame duck, then kept-alive
connections closed after their next answer) and exits 0.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from isthmus.cli.app import COMPONENTS, command, fail

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DRAIN_SECONDS = 5.0
"""What a SIGTERM leaves the servers to drain in (the kubelet's SIGKILL comes at the grace period's end)."""


def identity() -> tuple[str, str, str]:
    """(pod, namespace, cluster) of this container, as the module docstring says."""
    import socket

    pod = os.environ.get("POD_NAME") or socket.gethostname()
    namespace = os.environ.get("POD_NAMESPACE") or ""
    if not namespace:
        try:
            namespace = SA_NAMESPACE.read_text().strip()
        except OSError:
            namespace = "default"
    return pod, namespace, os.environ.get("ISTHMUS_CLUSTER", "")


async def _netexec(http_port: int, udp_port: int) -> None:
    import asyncio
    import signal

    from isthmus.local.kubelite.echo import EchoIdentity, EchoServer

    def say(port: int, protocol: str, line: str) -> None:
        print(line, flush=True)

    ports = [(http_port, "TCP")] + ([(udp_port, "UDP")] if udp_port > 0 else [])
    server = EchoServer(EchoIdentity(*identity()), "0.0.0.0", ports, say=say)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("agnhost netexec: terminating, draining connections", flush=True)
    await server.terminate(DRAIN_SECONDS)


async def _pause() -> None:
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


@command("agnhost", panel=COMPONENTS, hidden=True,
         context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def agnhost(
    ctx: typer.Context,
    subcommand: Annotated[str, typer.Argument(help="netexec (the echo servers) or pause.")],
    http_port: Annotated[int, typer.Option("--http-port", help="netexec: the HTTP port.")] = 8080,
    udp_port: Annotated[int, typer.Option("--udp-port", help="netexec: the UDP port (0: none).")] = 8081,
) -> None:
    """agnhost's netexec and pause, for the echo workload in containers (other flags are ignored)."""
    import asyncio

    if subcommand == "netexec":
        if not 0 < http_port < 65536 or not 0 <= udp_port < 65536:
            raise fail("agnhost netexec: --http-port and --udp-port must be port numbers")
        asyncio.run(_netexec(http_port, udp_port))
    elif subcommand == "pause":
        asyncio.run(_pause())
    else:
        raise fail(f"agnhost {subcommand}: this agnhost serves netexec and pause only")
