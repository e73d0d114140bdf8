"""Egress commands: `isthmus egress-operator`, `isthmus egress-forwarder` (run by the operator's
forwarder Deployments), `isthmus egress-gateway` (on the gateway host) and `isthmus show egress`."""

from __future__ import annotations

import asyncio
import ipaddress
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer
from lightkube import ApiError

from isthmus.cli.agent import default_identity
from isthmus.cli.app import (
    COMPONENTS,
    Background,
    ComponentKubeconfigOpt,
    ContextOpt,
    IdentityOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)
from isthmus.cli.lameduck import DEFAULT_SHUTDOWN_DELAY, LameDuck
from isthmus.cli.output import JSON, YAML, Column, list_document, print_document, print_table
from isthmus.cli.show import ShowRequest, register_show

if TYPE_CHECKING:
    from isthmus.runtime.manager import Manager

STANDBY_POLL_SECONDS = 0.25
"""How often a standby gateway reads the Lease (the failover time of a graceful stop)."""

ForwarderImageOpt = Annotated[
    str | None, typer.Option("--forwarder-image", metavar="IMAGE", help="Image of the forwarder pods (default: this "
                             "version's Isthmus image).", show_default=False)
]

ForwarderReplicasOpt = Annotated[
    int, typer.Option("--forwarder-replicas", min=1, metavar="N", help="Forwarder pods per ExternalService, spread "
                      "over nodes under a PodDisruptionBudget: with two, a drain or a rollout leaves one serving.")
]


def _ip(value: str, flag: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise fail(f"{flag} must be an IP address, not {value!r}") from None


@command("egress-operator", panel=COMPONENTS)
def egress_operator(
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    identity: IdentityOpt = None,
    image: ForwarderImageOpt = None,
    workers: Annotated[int, typer.Option(min=1, help="Concurrent reconciles.")] = 4,
    forwarder_replicas: ForwarderReplicasOpt = 2,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Bind SourceIPClaims and run each ExternalService's forwarder and data-plane objects (leader-elected)."""
    from isthmus.kube.client import make_client

    holder = identity or default_identity()

    async def build() -> Manager:
        return egress_operator_part(make_client(kubeconfig, context), holder, image, workers, forwarder_replicas)

    run_component("egress-operator", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)


def egress_operator_part(client: Any, holder: str, image: str | None, workers: int,
                         forwarder_replicas: int = 2) -> Manager:
    """The operator as a part of a command (`isthmus egress-operator`, `isthmus controller-manager`): its
    Manager."""
    from isthmus.api.image import IMAGE
    from isthmus.egress.operator import EgressOperator

    return EgressOperator(client, identity=holder, image=image or IMAGE, workers=workers,
                          forwarder_replicas=forwarder_replicas).manager


@command("egress-forwarder", panel=COMPONENTS)
def egress_forwarder(
    forwarder: Annotated[str, typer.Option("--forwarder", metavar="NS.NAME", help="The Forwarder object this pod serves "
                                           "(`<namespace>.<name>` of its ExternalService).")],
    listen: Annotated[str, typer.Option("--listen", metavar="IP", help="This pod's address: it listens there and its relays "
                                        "leave from it.")],
    namespace: Annotated[str, typer.Option("--namespace", metavar="NS", help="Namespace of the Forwarder objects.")]
    = "isthmus-system",
    shutdown_delay: Annotated[
        float, typer.Option("--shutdown-delay", metavar="SECONDS",
                            help="At SIGTERM: seconds to keep accepting and relaying while not ready (a lame "
                            "duck), so the operator drops this pod from the published EndpointSlice and the "
                            "proxies stop sending it new connections before it closes; the pod's "
                            "terminationGracePeriodSeconds must exceed it. 0: stop at once.")
    ] = DEFAULT_SHUTDOWN_DELAY,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Accept the source pods' connections for one ExternalService and relay them to the gateway."""
    from isthmus.egress.forwarder import ForwarderRuntime
    from isthmus.kube.client import make_client
    from isthmus.runtime.heap import settle_for_relaying

    address = _ip(listen, "--listen")
    if shutdown_delay < 0:
        raise fail("--shutdown-delay cannot be negative")
    settle_for_relaying()  # its first streams would otherwise copy into freshly faulted pages

    async def build() -> LameDuck:
        rt = ForwarderRuntime(make_client(kubeconfig, context), forwarder, namespace, address)
        return LameDuck(Background("egress-forwarder", rt.run, lambda: rt.ready), shutdown_delay, "egress-forwarder")

    run_component("egress-forwarder", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)


@command("egress-gateway", panel=COMPONENTS)
def egress_gateway(
    relay_address: Annotated[str, typer.Option("--relay-address", metavar="IP", help="Where forwarders' relays arrive (this "
                                               "replica's address; the gateway Service targets it).")],
    mode: Annotated[str, typer.Option("--mode", metavar="userspace|kernel",
                                      help="userspace: asyncio relays (unprivileged); kernel: nftables SNAT/DNAT "
                                      "in this network namespace (needs CAP_NET_ADMIN).")] = "userspace",
    interface: Annotated[str | None, typer.Option("--interface", metavar="NIC", help="Kernel mode: the interface the source IPs "
                                                  "are added to.", show_default=False)] = None,
    namespace: Annotated[str, typer.Option("--namespace", metavar="NS", help="Namespace of the Gateway objects and the Lease.")]
    = "isthmus-system",
    identity: IdentityOpt = None,
    lease_duration: Annotated[float, typer.Option("--lease-duration", min=1.0, metavar="SECONDS", help="Seconds a leader holds the "
                                                  "source IPs without renewing (failover takes about this long).")]
    = 15.0,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Own the claimed source IPs and carry ExternalService traffic through them (leader-elected)."""
    from isthmus.egress.gateway import GatewayRuntime
    from isthmus.kube.client import make_client

    if mode not in ("userspace", "kernel"):
        raise fail(f"--mode must be userspace or kernel, not {mode!r}")
    if mode == "kernel" and not interface:
        raise fail("--mode kernel needs --interface (where the source IPs are added)")
    address = _ip(relay_address, "--relay-address")
    holder = identity or default_identity()
    if mode == "userspace":
        from isthmus.runtime.heap import settle_for_relaying

        settle_for_relaying()  # it relays every byte: as the forwarder

    async def build() -> GatewayRuntime:
        # The standby polls the Lease every 0.25 s (reads only; the leader still renews every
        # retry_period): a leader that steps down hands over within about that long.
        retry = max(0.2, lease_duration / 8)
        gw = GatewayRuntime(make_client(kubeconfig, context), namespace=namespace, identity=holder,
                            relay_ip=address, mode="kernel" if mode == "kernel" else "userspace",
                            interface=interface, lease_duration=lease_duration,
                            renew_deadline=lease_duration * 2 / 3, retry_period=retry,
                            acquire_period=min(retry, STANDBY_POLL_SECONDS),
                            pod_name=os.environ.get("POD_NAME") or None,
                            pod_namespace=os.environ.get("POD_NAMESPACE") or None)
        return gw

    run_component("egress-gateway", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)


def show_egress(req: ShowRequest) -> None:
    """`isthmus show egress`: each ExternalService with its sources' claims and addresses, then the claims."""
    from isthmus.api.egress import ExternalService, SourceIPClaim
    from isthmus.egress.views import claim_rows, external_service_rows
    from isthmus.kube.client import make_client
    from isthmus.kube.resources import resource_for

    async def gather() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        client = make_client(req.kubeconfig, req.context, timeout=10.0)
        try:
            ns = req.namespace or "*"
            es_res: Any = resource_for(ExternalService)
            claim_res: Any = resource_for(SourceIPClaim)
            services = external_service_rows([o.to_dict() async for o in client.list(es_res, namespace=ns)])
            claims = claim_rows([o.to_dict() async for o in client.list(claim_res, namespace=ns)])
            return services, claims
        finally:
            await client.close()

    try:
        services, claims = asyncio.run(gather())
    except ApiError as err:
        raise fail(err.status.message or str(err)) from None
    if req.output in (JSON, YAML):  # one List: the ExternalServices, then the claims, told apart by kind
        print_document(list_document([{"kind": "ExternalService", **r} for r in services]
                                     + [{"kind": "SourceIPClaim", **c} for c in claims]), req.output)
        return
    if not services and not claims:
        typer.echo("no ExternalServices or SourceIPClaims" + (f" in namespace {req.namespace}" if req.namespace
                                                               else ""), err=True)
        return
    rows: list[list[str]] = []
    for r in services:
        rows.append([r["namespace"], r["name"], r["target"], ",".join(r["ports"]), "", "", "", "", r["ready"],
                     r["problem"] or "-", r["address"] or "-", r["forwarder"] or "-"])
        for src in r["sources"]:
            rows.append(["", "", "", "", src["service"], src["claim"], src["sourceIP"] or "-",
                         "-" if src["endpoints"] is None else str(src["endpoints"]), "", "", "", ""])
    if rows:
        print_table(["NAMESPACE", "NAME", "TARGET", "PORTS", "SOURCE SERVICE", "CLAIM", "SOURCE IP", "PODS", "READY",
                     "PROBLEM", Column("ADDRESS", wide=True), Column("FORWARDER", wide=True)], rows, req.output)
    if claims:
        if rows:
            typer.echo()  # two tables, as kubectl prints two kinds
        print_table(["NAMESPACE", "CLAIM", "CLASS", "PHASE", "SOURCE IP", "REASON"],
                    [[c["namespace"], c["name"], c["class"], c["phase"], c["sourceIP"] or "-",
                      f'{c["reason"]}: {c["message"]}' if c["message"] else c["reason"]] for c in claims],
                    req.output)


register_show("egress", show_egress)  # ExternalServices and SourceIPClaims
