"""Exposure commands: `isthmus mcsvc` (member side), `isthmus mcsvc-broker` (broker side),
`isthmus expose` (writes a MultiClusterService) and `isthmus show mcs`."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Annotated, Any

import typer

from isthmus.cli import complete
from isthmus.cli.agent import OptionalClusterIdOpt, default_identity
from isthmus.cli.app import (
    COMPONENTS,
    SERVICES,
    Background,
    ComponentKubeconfigOpt,
    ContextOpt,
    IdentityOpt,
    KubeconfigOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)
from isthmus.cli.output import JSON, TABLE, YAML, Column, OutputOpt, print_document, print_list
from isthmus.cli.show import ShowRequest, open_broker, register_show

if TYPE_CHECKING:
    from isthmus.runtime.manager import Manager

log = logging.getLogger(__name__)


@command("mcsvc", panel=COMPONENTS)
def mcsvc(
    cluster_id: OptionalClusterIdOpt = None,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    identity: IdentityOpt = None,
    workers: Annotated[int, typer.Option(min=1, help="Concurrent reconciles.")] = 8,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Apply the broker's MultiClusterServices in this member cluster (leader-elected)."""
    from isthmus.kube.client import make_client

    holder = identity or default_identity()

    async def build() -> Background:
        return mcsvc_part(make_client(kubeconfig, context), cluster_id, holder, workers)

    run_component("mcsvc", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)


def mcsvc_part(client: Any, cluster_id: str | None, holder: str, workers: int, *,
               standby_poll: float | None = None) -> Background:
    """The member controller as a part of a command (`isthmus mcsvc`, `isthmus controller-manager`):
    it waits for the cluster to join (not ready meanwhile), then runs. `standby_poll`: one of several
    replicas (the controller manager's), ready when healthy, leading or not (`Manager.healthy`), and
    reading the Lease that often while standing by (`Manager.stand_by`)."""
    from isthmus.clusterset.brokerinfo import BROKER_TIMEOUT
    from isthmus.clusterset.control import ClustersetError
    from isthmus.clusterset.membership import JOIN_POLL_SECONDS, membership
    from isthmus.exposure.member import MemberController

    found: list[MemberController] = []
    said: list[str] = []

    async def attempt() -> MemberController | None:
        try:
            joined_id, info = await membership(client)
        except ClustersetError as err:
            if not said:
                log.warning("%s; waiting (not ready until then)", err)
                said.append(str(err))
            return None
        if cluster_id is not None and cluster_id != joined_id:
            raise fail(f"this cluster joined as {joined_id!r}, not {cluster_id!r}")
        return MemberController(cluster=client, broker=info.client(timeout=BROKER_TIMEOUT),
                                cluster_id=joined_id, broker_namespace=info.namespace,
                                identity=holder, workers=workers)

    async def run() -> None:
        while not found:
            made = await attempt()
            if made is not None:
                if standby_poll is not None:
                    made.manager.stand_by(standby_poll)
                found.append(made)
                break
            await asyncio.sleep(JOIN_POLL_SECONDS)
        await found[0].run()

    async def release() -> None:
        if found:
            await found[0].manager.release()

    def ready() -> bool:
        return bool(found) and (found[0].manager.healthy if standby_poll is not None else found[0].ready)

    return Background("mcsvc", run, ready, on_stop=release)


@command("mcsvc-broker", panel=COMPONENTS)
def mcsvc_broker(
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    provider: Annotated[str, typer.Option("--provider", metavar="haproxy|fake",
                                          help="The multi-cluster load-balancer provider.")] = "haproxy",
    broker_namespace: Annotated[str, typer.Option("--broker-namespace", help="Where the clusters and the "
                                                  "collected EndpointSlices live.")] = "isthmus-broker",
    grace: Annotated[float, typer.Option("--dead-cluster-grace", min=1.0, help="Seconds without a heartbeat after "
                                         "which a cluster no longer holds up a delete.")] = 60.0,
    identity: IdentityOpt = None,
    workers: Annotated[int, typer.Option(min=1, help="Concurrent reconciles.")] = 8,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Summarise MultiClusterServices and run their load balancers, on the broker (leader-elected)."""
    from isthmus.exposure import haproxy as _haproxy  # noqa: F401  (registers the provider)
    from isthmus.exposure.broker import BrokerController
    from isthmus.exposure.provider import PROVIDERS, build
    from isthmus.kube.client import make_client

    if provider not in PROVIDERS:
        raise fail(f"--provider must be one of {', '.join(sorted(PROVIDERS))}, not {provider!r}")
    holder = identity or default_identity()

    async def make() -> Manager:
        client = make_client(kubeconfig, context)
        return BrokerController(client, build(provider, client), broker_namespace=broker_namespace,
                                identity=holder, grace=grace, workers=workers).manager

    run_component("mcsvc-broker", make, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _ports(value: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in _split(value):
        name, _, number = item.rpartition(":")
        if not number.isdigit():
            raise fail(f"--ports: {item!r} is not a port or name:port")
        out.append({"name": name, "port": int(number)} if name else {"port": int(number)})
    return out


@command("expose", panel=SERVICES)
def expose(
    name: Annotated[str, typer.Argument(help="The Service to expose (the MultiClusterService gets its name).",
                                        autocompletion=complete.exposable)],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The Service's namespace.",
                                           autocompletion=complete.namespaces)] = "default",
    types: Annotated[list[str], typer.Option("--type", metavar="CrossCluster|LoadBalancer",
                                             help="How to expose it (repeat, or comma-separate, for both).")]
    = ["CrossCluster"],  # noqa: B006 - typer reads the default
    providers: Annotated[str | None, typer.Option("--providers", metavar="C1,C2",
                                                  help="Clusters backing it (default: every cluster).")] = None,
    consumers: Annotated[str | None, typer.Option("--consumers", metavar="C3", help="Clusters reaching it across "
                                                  "clusters (default: every cluster).")] = None,
    ports: Annotated[str | None, typer.Option("--ports", metavar="80,https:443",
                                              help="Only these Service ports (default: all).")] = None,
    affinity: Annotated[str | None, typer.Option("--affinity", metavar="local|remote|none",
                                                 help="Prefer endpoints of the asking cluster (local) or of "
                                                 "the others (remote).")] = None,
    output: OutputOpt = TABLE,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> None:
    """Write a MultiClusterService on the broker.

    From a member's context it goes to that member's broker, through the kubeconfig's context for
    it (the broker admin's credentials; the local clusterset's `broker`). Prints what changed
    (created, configured, unchanged); with -o json or yaml, the object."""
    from lightkube import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace
    from lightkube.types import PatchType

    from isthmus.api.mcs import AFFINITY_ANNOTATION, AFFINITY_VALUES
    from isthmus.api.mcsvc import MultiClusterService
    from isthmus.kube.client import load_config
    from isthmus.kube.helpers import get_or_none
    from isthmus.kube.resources import resource_for

    kinds = [t for value in types for t in _split(value)]
    if affinity is not None and affinity not in AFFINITY_VALUES:
        raise fail(f"--affinity must be one of {', '.join(AFFINITY_VALUES)}, not {affinity!r}")
    spec: dict[str, Any] = {"types": kinds}
    if ports:
        spec["ports"] = _ports(ports)
    if providers is not None:
        spec["providerClusters"] = [{"name": c} for c in _split(providers)]
    if consumers is not None:
        spec["consumerClusters"] = [{"name": c} for c in _split(consumers)]
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if affinity is not None:
        meta["annotations"] = {AFFINITY_ANNOTATION: affinity}
    body = {"apiVersion": MultiClusterService.crd.api_version, "kind": MultiClusterService.crd.kind,
            "metadata": meta, "spec": spec}

    async def write() -> tuple[str, Any, str]:
        client, where = await open_broker(kubeconfig, context, request_timeout=10.0, write=True)
        try:
            res: Any = resource_for(MultiClusterService)
            if await get_or_none(client, Namespace, namespace) is None:
                await client.create(Namespace(metadata=ObjectMeta(name=namespace)))
            before = await get_or_none(client, res, name, namespace=namespace)
            after = await client.patch(res, name, body, namespace=namespace, patch_type=PatchType.APPLY,
                                       field_manager="isthmus-expose", force=True)
            if before is None:
                return "created", after, where
            same = before.metadata.resourceVersion == after.metadata.resourceVersion
            return "unchanged" if same else "configured", after, where
        finally:
            await client.close()

    try:
        change, obj, where = asyncio.run(write())
    except ApiError as err:
        raise fail(err.status.message or str(err)) from None
    if output in (JSON, YAML):
        print_document(obj.to_dict(), output)
        return
    # Said only when the context given was a member's: the object went elsewhere than it names.
    named = context or load_config(kubeconfig, None).context_name
    elsewhere = where.startswith("on the broker") and where != f"on the broker (context {named})"
    typer.echo(f"multiclusterservice {namespace}/{name} {change}" + (f" {where}" if elsewhere else ""))


def show_mcs(req: ShowRequest) -> None:
    """`isthmus show mcs`: each MultiClusterService, its clusters, conditions and address, read on
    the broker (where they live) from whichever clusterset context is given."""
    from lightkube import ALL_NS

    from isthmus.api.mcsvc import MultiClusterService
    from isthmus.clusterset.control import list_if_kind
    from isthmus.exposure.views import mcs_rows
    from isthmus.kube.resources import resource_for

    async def gather() -> tuple[list[dict[str, Any]], str]:
        client, where = await open_broker(req.kubeconfig, req.context, request_timeout=10.0)
        try:
            res: Any = resource_for(MultiClusterService)
            # Where the kind is not served (a cluster outside a clusterset), none exist: the message says where.
            items = await list_if_kind(client, res, req.namespace or ALL_NS)
            return mcs_rows([o.to_dict() for o in items]), where
        finally:
            await client.close()

    rows, where = asyncio.run(gather())
    columns: list[Column | str] = ["NAMESPACE", "NAME", "TYPES", "CLUSTER", "ROLE", "STATE", "READY", "ADDRESS", "PROBLEM",
               Column("PROVIDERS", wide=True), Column("CONSUMERS", wide=True)]

    def mcs(r: dict[str, Any]) -> list[list[str]]:
        out = [[r["namespace"], r["name"], ",".join(r["types"]), "", "", "", r["ready"], r["address"] or "-",
                r["problem"] or "-", r["providers"] or "-", r["consumers"] or "-"]]
        out += [["", "", "", c["name"], c["role"], c["state"], "", "", c["problem"] or "", "", ""]
                for c in r["clusters"]]
        return out

    scope = f"in namespace {req.namespace}" if req.namespace else "in any namespace"
    print_list(rows, req.output, columns, mcs, empty=f"no multiclusterservices {scope} {where}")


register_show("mcs", show_mcs, on_broker=True)  # MultiClusterServices live on the broker
