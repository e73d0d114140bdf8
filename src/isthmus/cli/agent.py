"""`isthmus agent`: the long-running discovery agent of one member cluster."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import TYPE_CHECKING, Annotated

import typer

from isthmus.api.mcs import DEFAULT_DEAD_CLUSTER_GRACE
from isthmus.cli.app import (
    COMPONENTS,
    Background,
    ComponentKubeconfigOpt,
    ContextOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    _cluster_id,
    command,
    fail,
    run_component,
)

if TYPE_CHECKING:
    from isthmus.discovery.agent import Agent

log = logging.getLogger(__name__)

OptionalClusterIdOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster-id",
        help="This cluster's ID in the clusterset (default: the one `isthmus join` stored in the cluster; "
             "until it has joined, wait for it).",
        callback=_cluster_id,
        show_default=False,
    ),
]

def default_identity() -> str:
    """The pod's name where there is one (stable across restarts of the pod), else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()


@command("agent", panel=COMPONENTS)
def agent(
    cluster_id: OptionalClusterIdOpt = None,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    identity: Annotated[
        str | None,
        typer.Option(
            "--identity",
            help="Holder identity in the agent's leader-election Lease; an agent restarted with the same "
                 "identity takes its own lease back at once (default: $POD_NAME, else the host name).",
            show_default=False,
        ),
    ] = None,
    dead_cluster_grace: Annotated[
        float,
        typer.Option(
            "--dead-cluster-grace", min=1.0,
            help="Seconds without a heartbeat after which a cluster's endpoints are withdrawn from every "
                 "import (restored when it returns; a broker outage never triggers it).",
        ),
    ] = DEFAULT_DEAD_CLUSTER_GRACE,
    metrics_addr: MetricsAddrOpt = None,
    workers: Annotated[int, typer.Option(min=1, help="Concurrent reconciles.")] = 16,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Export this cluster's services to the broker and import everyone's (leader-elected)."""
    from isthmus.discovery.agent import Agent
    from isthmus.discovery.errors import AgentConfigError, AgentNotJoined
    from isthmus.kube.client import make_client

    holder = identity or default_identity()
    if not holder.strip():
        raise fail("--identity must not be empty")

    async def build() -> Background:
        from isthmus.clusterset.membership import JOIN_POLL_SECONDS

        client = make_client(kubeconfig, context)
        waiting: list[str] = []

        async def attempt() -> Agent | None:
            """The agent, or None while the cluster has not joined; other configuration errors end the command."""
            from isthmus.cli.manager import STANDBY_POLL_SECONDS

            try:
                agent = await Agent.from_cluster(client, cluster_id, workers=workers, identity=holder,
                                                 dead_cluster_grace=dead_cluster_grace)
                # A standby looks at the Lease often, to take it as soon as the leader's pod hands it back.
                agent.manager.stand_by(STANDBY_POLL_SECONDS)
                return agent
            except AgentNotJoined as err:
                if not waiting:  # say it once, not every poll
                    log.warning("%s; waiting (not ready until then)", err)
                    waiting.append(str(err))
                return None
            except AgentConfigError as err:
                raise fail(str(err)) from None

        found: list[Agent] = []
        first = await attempt()
        if first is not None:
            found.append(first)

        async def run() -> None:
            while not found:
                await asyncio.sleep(JOIN_POLL_SECONDS)
                joined = await attempt()
                if joined is not None:
                    log.info("cluster joined as %s: starting", joined.cluster_id)
                    found.append(joined)
            try:
                await found[0].run()
            except AgentConfigError as err:  # e.g. the broker no longer accepts this cluster's token
                raise fail(str(err)) from None

        async def release() -> None:
            # Best effort and bounded (the Manager's release): a successor need not wait out the lease,
            # but an API server that does not answer must not hold up the shutdown (it expires on its own).
            if found:
                await found[0].manager.release()

        # Ready when healthy, leading or standing by (deploy/member/agent: two replicas under a budget).
        return Background("agent", run, lambda: bool(found) and found[0].manager.healthy, on_stop=release)

    run_component("agent", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)
