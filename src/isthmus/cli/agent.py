"""`isthmus agent`: the long-running discovery agent of one member cluster."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from isthmus.cli.app import app, fail


@app.command("agent")
def agent(
    cluster_id: Annotated[str, typer.Option("--cluster-id", help="This cluster's ID (as given to join).")],
    kubeconfig: Annotated[str | None, typer.Option(help="Kubeconfig of this cluster (default $KUBECONFIG).")] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context.")] = None,
    metrics_addr: Annotated[str | None, typer.Option(help="Serve /metrics, /healthz, /readyz here (host:port).")] = None,
    workers: Annotated[int, typer.Option(help="Concurrent reconciles.")] = 16,
    log_format: Annotated[str, typer.Option(help="Log format: text or json.")] = "text",
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Export this cluster's services to the broker and import everyone's (leader-elected)."""
    from isthmus.kube.client import KubeConfigError, make_client
    from isthmus.mcs.agent import Agent, AgentConfigError, run_agent
    from isthmus.runtime import HealthServer, setup_logging

    if log_format not in ("text", "json"):
        raise fail("--log-format must be text or json")
    setup_logging(log_format, log_level)

    async def main() -> None:
        client = make_client(kubeconfig, context)
        the_agent = await Agent.from_cluster(client, cluster_id, workers=workers)
        health = None
        if metrics_addr:
            health = HealthServer()
            health.add_readiness_check("agent", lambda: the_agent.ready)
            await health.start(metrics_addr)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await run_agent(the_agent, stop)
        finally:
            if health is not None:
                await health.stop()

    try:
        asyncio.run(main())
    except (KubeConfigError, AgentConfigError) as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot reach the cluster: {e}") from None
